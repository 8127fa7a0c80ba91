"""`skiff metadata` exits within its grace period on SIGTERM, under load (issue 25, item 3).

A real `skiff metadata` on PostgreSQL (its commit listener thread included) serves a real
agent (file:// bucket) while a confluent-kafka producer writes through it, so commits and
the agent's commit long polls are in flight when the stop comes. RUNS times: SIGTERM,
assert the process is gone within GRACE_S (uvicorn's 5 s for requests in flight, then
closing the service), start it again on the same port, wait until records flow again.
The process is polled against a deadline (it is external)."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.agents import SkiffProcess, agent_args
from tests.support.s3servers import free_port

pytestmark = pytest.mark.slow

RUNS = 10
GRACE_S = 5.0 + 5.0  # uvicorn's timeout_graceful_shutdown, then the service's close and exit


@contextmanager
def _producing(bootstrap: str, topic: str) -> Iterator[Callable[[], int]]:
    stop = threading.Event()
    delivered = [0]

    def on_delivery(err: object, _msg: object) -> None:
        if err is None:
            delivered[0] += 1

    def run() -> None:
        p = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 30000, "log_level": 0}
        )
        while not stop.is_set():
            try:
                p.produce(topic, value=b"v", on_delivery=on_delivery)
            except BufferError:
                pass  # metadata is away: the queue fills until it is back
            p.poll(0.005)
        p.flush(5)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        yield lambda: delivered[0]
    finally:
        stop.set()
        t.join(30)


def _until(cond: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_metadata_exits_after_sigterm_under_load(
    spawn_skiff: Callable[..., SkiffProcess], pg_url: str, tmp_path: Path
) -> None:
    mport = free_port()
    md = spawn_skiff("metadata", "--db", pg_url, "--port", "{port}", port=mport)
    url = f"http://127.0.0.1:{mport}"
    agent = spawn_skiff(*agent_args(f"file://{tmp_path / 'bucket'}", url), "--agent-id", "stop-a")
    times_s = []
    with _producing(agent.bootstrap, "stop-load") as delivered:
        for run in range(RUNS):
            seen = delivered()
            _until(lambda seen=seen: delivered() > seen + 20, f"records to flow (run {run})")  # type: ignore[misc]
            start = time.monotonic()
            md.proc.send_signal(signal.SIGTERM)
            try:
                md.proc.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                md.kill(signal.SIGABRT)
                pytest.fail(
                    f"run {run}: skiff metadata outlived SIGTERM by {GRACE_S} s:\n{md.log.read_text()[-4000:]}"
                )
            times_s.append(time.monotonic() - start)
            md = spawn_skiff("metadata", "--db", pg_url, "--port", "{port}", port=mport)
    assert max(times_s) < GRACE_S, times_s
