"""`skiff playground --demo` (issue 25, item 3): a real playground process, whose own
sample traffic must show, within a deadline (polled: the process is external):

- the three demo topics with records, `demo-customers` compacted (cleanup.policy=compact);
- the consumer group `demo-dashboard` Stable, with committed offsets on `demo-orders`;
- compaction at work: reading `demo-customers` from the start returns fewer records than
  its log end offsets add up to, and at most one per key past the cleaned part;

and a SIGTERM stops it (demo clients included) within the grace period, RUNS times.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.agents import REPO, SkiffProcess, _spawn, skiff_command
from tests.support.s3servers import free_port

pytestmark = pytest.mark.slow

GRACE_S = 10.0  # the agent's drain of a small playground, the exit bound (3 s) and start-up noise
RUNS = 3


def _skiff_json(*args: str) -> Any:
    r = subprocess.run(
        [*skiff_command(), *args, "--json"], capture_output=True, text=True, timeout=60, cwd=str(REPO)
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _until(cond: Callable[[], bool], what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _start(tmp_path: Path, run: int) -> tuple[SkiffProcess, str]:
    port, mport = free_port(), free_port()
    args = ["playground", "--demo", "--data-dir", str(tmp_path / f"d{run}"), "--port", str(port)]
    p = _spawn(
        [*args, "--metadata-port", str(mport), "--compaction-interval-ms", "2000"],
        port,
        tmp_path / f"pg{run}.log",
    )
    return p, f"http://127.0.0.1:{mport}"


def _read_all(bootstrap: str, topic: str, ends: dict[int, int]) -> list[tuple[int, bytes | None]]:
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "demo-test-reader", "enable.auto.commit": False}
    )
    c.assign([TopicPartition(topic, p, 0) for p in ends])
    out: list[tuple[int, bytes | None]] = []
    deadline = time.monotonic() + 60
    positions = dict.fromkeys(ends, 0)
    try:
        while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                positions[m.partition()] = m.offset() + 1
                if m.offset() < ends[m.partition()]:
                    out.append((m.partition(), m.key()))
    finally:
        c.close()
    return out


def _stop_within_grace(p: SkiffProcess) -> float:
    start = time.monotonic()
    p.proc.send_signal(signal.SIGTERM)
    try:
        p.proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError(
            f"the playground outlived SIGTERM by {GRACE_S} s:\n{p.log.read_text()[-3000:]}"
        ) from None
    return time.monotonic() - start


def test_demo_shows_data_groups_and_compaction(tmp_path: Path) -> None:
    p, url = _start(tmp_path, 0)
    try:

        def described() -> dict[str, Any]:
            return {t["topic"]: t for t in _skiff_json("topics", "describe", "--metadata", url)}

        _until(
            lambda: {"demo-orders", "demo-clicks", "demo-customers"} <= set(described()), "the demo topics"
        )
        topics = described()
        assert topics["demo-customers"]["configs"]["cleanup.policy"] == "compact"

        def group_committed() -> bool:
            g = _skiff_json("groups", "describe", "demo-dashboard", "--metadata", url)
            return g["state"] == "Stable" and any((r["current_offset"] or 0) > 0 for r in g["partitions"])

        _until(group_committed, "demo-dashboard to commit offsets")

        def compacted() -> bool:
            parts = described()["demo-customers"]["partitions"]
            ends = {q["partition"]: q["log_end_offset"] for q in parts}
            read = _read_all(p.bootstrap, "demo-customers", ends)
            return sum(ends.values()) > 100 and len(read) < sum(ends.values())

        _until(compacted, "demo-customers to be compacted", timeout_s=120)
        assert _stop_within_grace(p) < GRACE_S
        assert p.proc.returncode == 0, p.log.read_text()[-3000:]
    finally:
        p.kill()


def test_demo_playground_stops_within_the_grace_period(tmp_path: Path) -> None:
    for run in range(1, RUNS + 1):
        p, url = _start(tmp_path, run)
        try:
            _until(
                lambda url=url: (  # type: ignore[misc]
                    _skiff_json("groups", "describe", "demo-dashboard", "--metadata", url)["state"]
                    == "Stable"
                ),
                "the demo's group",
            )
            took_s = _stop_within_grace(p)
            assert p.proc.returncode == 0 and took_s < GRACE_S
        finally:
            p.kill()
