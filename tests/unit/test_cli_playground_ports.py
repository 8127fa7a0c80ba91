"""The playground takes both its ports before it announces itself (issue 25): with the
metadata port or the Kafka port taken, `run_playground` raises the bind's OSError and has
printed nothing, in particular not "Skiff playground is up." (the command line turns the
error into its one line: tests/e2e/test_cli_errors.py)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from skiff.agent.process import run_playground


@pytest.mark.parametrize("taken", ["metadata", "kafka"])
def test_a_taken_port_fails_before_the_announcement(
    taken: str,
    held_port: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SKIFF_METRICS_PORT", raising=False)
    ports = {"metadata": 0, "kafka": 0}  # 0: any free port
    ports[taken] = held_port
    with pytest.raises(OSError) as raised:
        run_playground(
            data_dir=str(tmp_path), host="127.0.0.1", port=ports["kafka"], metadata_port=ports["metadata"]
        )
    assert raised.value.errno == errno.EADDRINUSE
    assert "is up" not in capsys.readouterr().out
