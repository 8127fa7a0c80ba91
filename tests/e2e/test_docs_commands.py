"""The commands README.md and docs/*.md show, run as written (tests/support/doc_commands.py's
RUN_HERE) against a playground started by the README's own command.

`bash scripts/playground.sh` and `bash scripts/playground.sh --demo` start the playground
(ports and data directory through the `SKIFF_*` variables its flags read: the documented
defaults 9092/9093 may be taken on a shared machine); each must print "is up" and exit 0
on SIGTERM. The other commands run in the order the docs show them, through `bash -c`,
with the documented addresses replaced by the test's (`adapt`); each must exit 0, and
what they print is checked where the docs promise something (the demo's topics and group,
the record kcat produced, inspect's chunks). The documented default cluster
(`http://127.0.0.1:9093`) is the test's playground through SKIFF_METADATA_URL.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.doc_commands import REPO, RUN_HERE, DocCommand, all_commands
from tests.support.s3servers import free_port

pytestmark = pytest.mark.slow


@dataclass
class Started:
    proc: subprocess.Popen[bytes]
    log: Path
    port: int
    metadata_port: int
    data_dir: Path
    env: dict[str, str]


def _command(key: str) -> DocCommand:
    return next(c for c in all_commands() if c.key == key)


def _start(command: DocCommand, tmp_path: Path, name: str) -> Started:
    port, mport = free_port(), free_port()
    data = tmp_path / name
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SKIFF_")},
        "SKIFF_PORT": str(port),
        "SKIFF_METADATA_PORT": str(mport),
        "SKIFF_DATA_DIR": str(data),
        "SKIFF_COMPACTION_INTERVAL_MS": "2000",
        "PYTHONUNBUFFERED": "1",
    }
    log = tmp_path / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["bash", "-c", command.text], cwd=str(REPO), env=env, stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 120  # the script may set up ./.venv first; polled: external
    while "is up" not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{command.key} did not come up:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    return Started(proc, log, port, mport, data, env)


def _stop(s: Started) -> None:
    if s.proc.poll() is None:
        s.proc.send_signal(signal.SIGTERM)
        try:
            s.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            s.proc.kill()
            s.proc.wait()
    assert s.proc.returncode == 0, s.log.read_text()[-3000:]


def adapt(text: str, s: Started, tmp_path: Path) -> str:
    """The documented command, pointed at this test's playground, interpreter and files."""
    segments = sorted((s.data_dir / "bucket" / "segments").rglob("*.seg"))
    out = (
        text.replace("localhost:9092", f"127.0.0.1:{s.port}")
        .replace("http://localhost:9093", f"http://127.0.0.1:{s.metadata_port}")
        .replace("http://skiff-metadata:9093", f"http://127.0.0.1:{s.metadata_port}")
        .replace(".venv/bin/", f"{Path(sys.executable).parent}/")
        .replace("/run/secrets/app1", str(tmp_path / "app1.password"))
    )
    if out.startswith("skiff "):
        out = f"{Path(sys.executable).parent}/{out}"
    if "<file>" in out:
        assert segments, "the playground wrote no segment file yet"
        out = out.replace("skiff-data/bucket/segments/<file>.seg", str(segments[0]))
    return out


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Started]:
    assert shutil.which("kcat"), (
        "kcat is missing: the README's kcat section needs it (scripts/system-deps.sh)"
    )
    s = _start(_command("bash scripts/playground.sh --demo"), tmp_path, "demo")
    yield s
    _stop(s)


def test_the_plain_playground_command(tmp_path: Path) -> None:
    _stop(_start(_command("bash scripts/playground.sh"), tmp_path, "plain"))


def test_documented_commands_run_as_written(demo: Started, tmp_path: Path) -> None:
    (tmp_path / "app1.password").write_text("app1-secret\n")
    env = {**demo.env, "SKIFF_METADATA_URL": f"http://127.0.0.1:{demo.metadata_port}"}
    started = {"bash scripts/playground.sh", "bash scripts/playground.sh --demo"}
    outputs: dict[str, str] = {}
    deadline = time.monotonic() + 60
    for key in RUN_HERE:
        if key in started:
            continue
        text = adapt(_command(key).text, demo, tmp_path)
        while True:  # the demo's first records and group take a moment after "is up"
            r = subprocess.run(
                ["bash", "-c", text], cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120
            )
            if r.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert r.returncode == 0, f"{key}\n-> {text}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        outputs[key] = r.stdout
    assert "demo-customers" in outputs[".venv/bin/skiff topics describe"]
    assert "playground" in outputs[".venv/bin/skiff topics describe"]  # leaders by name
    assert "demo-dashboard" in outputs[".venv/bin/skiff groups describe demo-dashboard"]
    assert (
        "cleanup.policy=compact"
        in outputs[".venv/bin/skiff topics describe demo-customers --bootstrap-server localhost:9092"]
    )
    assert "key1 hello" in outputs["kcat -b localhost:9092 -t demo -C -e -f '%p %o %k %s\\n'"]
    assert "app1" in outputs["skiff users list --metadata http://skiff-metadata:9093"]
    # docs/schemas.md: the CLI registers, Confluent's REST API at the same URL sees it
    register = ".venv/bin/skiff schemas register orders-value --schema orders-v1.avsc --metadata http://localhost:9093"
    assert outputs[register].strip() == "orders-value version 1: schema id 1"
    assert json.loads(outputs["curl http://localhost:9093/subjects"]) == ["orders-value"]
    assert json.loads(outputs["curl http://localhost:9093/schemas/ids/1"])["schema"].startswith('{"type"')
    assert (
        "orders-value: FULL"
        in outputs[
            ".venv/bin/skiff schemas config orders-value --compatibility FULL --metadata http://localhost:9093"
        ]
    )
