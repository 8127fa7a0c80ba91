"""Helpers the benchmark scripts share: a percentile and starting a `skiff` process.

Scripts run as `python bench/<name>.py`; each puts the repository root on `sys.path` and
imports this as `bench.support`.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.agents import skiff_command, wait_for_port


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
