"""Piped `skiff` output is plain: no ANSI escapes, no log lines (they go to stderr), and
rows not wrapped at 80 columns, even at `--log-level DEBUG` (httpx and friends included).

`skiff compact --once` (a whole pass on an empty cluster: its summary table) and
`skiff topics list` run as subprocesses with stdout a pipe, against a metadata service in
this process.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from skiff.metadata.service import MetadataService

from tests.component.test_metadata_http import ServerThread

LOG_LINE = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR)\b")


@pytest.fixture(scope="module")
def metadata_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = tmp_path_factory.mktemp("md") / "metadata.db"
    service = MetadataService.from_url(f"sqlite:///{db}")
    try:
        with ServerThread(service) as url:
            yield url
    finally:
        service.close()


def _piped(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKIFF_", "FORCE_COLOR", "COLUMNS"))}
    env["TERM"] = "xterm-256color"  # a colour terminal's TERM: the pipe alone must turn colour off
    return subprocess.run(
        [sys.executable, "-m", "skiff.cli", "--log-level", "DEBUG", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def _assert_plain(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stdout
    lines = proc.stdout.splitlines()
    assert not [line for line in lines if LOG_LINE.search(line)], proc.stdout
    return lines


def test_compact_summary_piped_is_plain_and_unwrapped(metadata_url: str) -> None:
    proc = _piped("compact", "--once", "--bucket", "memory://b", "--metadata", metadata_url)
    lines = _assert_plain(proc)
    row = [line for line in lines if "aborted txn batches / markers dropped" in line]
    assert len(row) == 1 and "0 / 0" in row[0], proc.stdout  # label and value on one line
    assert "DEBUG" in proc.stderr or "INFO" in proc.stderr  # the log went where it belongs


def test_topics_list_piped_is_plain(metadata_url: str) -> None:
    created = _piped(
        "topics",
        "create",
        "a-topic-with-a-rather-long-name-" + "x" * 80,
        "--partitions",
        "3",
        "--metadata",
        metadata_url,
    )
    _assert_plain(created)
    lines = _assert_plain(_piped("topics", "list", "--metadata", metadata_url))
    assert any(("x" * 80) in line and "3" in line.split("x" * 80)[1] for line in lines), lines
