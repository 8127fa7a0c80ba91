"""Helpers the benchmark scripts share: a percentile, starting a `skiff` process, and a
`skiff metadata` process on SQLite (`start_metadata`).

Scripts run as `python bench/<name>.py`; each puts the repository root on `sys.path` and
imports this as `bench.support`.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.agents import skiff_command, wait_for_port
from tests.support.s3servers import free_port


def pct(values: list[float], q: float) -> float:
    """The q-quantile of `values` (nearest rank, no interpolation); NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start(args: list[str], port: int, log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`skiff <args>` with its output in `log`, once it listens on `port`."""
    proc = subprocess.Popen(
        [*skiff_command(), *args], stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env
    )
    wait_for_port(port, proc, log)
    return proc


@contextmanager
def start_metadata(work: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """A `skiff metadata` process on `<work>/md.db` (SQLite), its log in `<work>/metadata.log`;
    yields its URL once it listens, and stops it (SIGTERM, then waits) on exit."""
    port = free_port()
    log = work / "metadata.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*skiff_command(), "metadata", "--db", f"sqlite:///{work}/md.db", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        wait_for_port(port, proc, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
