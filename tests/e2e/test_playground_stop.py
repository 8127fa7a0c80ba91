"""A stopped playground exits (issue 25, item 3).

In 4 of 21 SIGTERM stops during the clients' test suites the playground logged "stopped
cleanly" and then lived on until SIGKILL. This test starts `python -m skiff.cli
playground` (free ports on 127.0.0.1, a temporary data directory, maintenance on a short
timer) RUNS times, puts it under load (a confluent-kafka producer and a consumer in a
group, both running), sends SIGTERM once records have gone both ways, and asserts the
process is gone within the grace period: its shutdown timeout plus the bounded exit
(`agent.process.run_until_exit`, EXIT_TIMEOUT_MS). The process is polled against a
deadline. One that outlives it is sent SIGABRT, so that `PYTHONFAULTHANDLER` prints every
thread's stack into the log the failure shows. (The original hang did not recur in these
runs; tests/unit/test_run_until_exit.py covers the two ways a process outlived its stop:
a worker thread that does not return, a task that swallows its cancellation.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from tests.e2e.test_clients_roundtrip import create_topic
from tests.support.agents import wait_for_port
from tests.support.s3servers import free_port

pytestmark = pytest.mark.slow

RUNS = 10
SHUTDOWN_TIMEOUT_MS = 3_000
# The shutdown timeout, then closing what is left and the interpreter's exit.
GRACE_S = SHUTDOWN_TIMEOUT_MS / 1000 + 5.0
REPO = Path(__file__).resolve().parents[2]


@contextmanager
def _running_clients(bootstrap: str, topic: str, flowing: threading.Event) -> Iterator[None]:
    """A producer and a consumer looping in threads; `flowing` is set once the consumer
    has read a record (the producer's records made it through the agent both ways)."""
    stop = threading.Event()

    def produce() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 5000})
        i = 0
        while not stop.is_set():
            try:
                p.produce(topic, key=f"k{i % 50}", value=f"v{i}")
            except BufferError:
                pass  # the local queue is full while the agent is gone: poll drains it
            p.poll(0.01)
            i += 1
        p.purge()  # the playground is gone: nothing left to deliver, nothing to wait for
        p.flush(0)

    def consume() -> None:
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"g-{topic}",
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                # no commit at close: the coordinator is gone by then, and close would wait
                "enable.auto.commit": False,
            }
        )
        c.subscribe([topic])
        while not stop.is_set():
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                flowing.set()
        c.close()

    threads = [threading.Thread(target=f, daemon=True) for f in (produce, consume)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=15)


def _wait_gone(proc: subprocess.Popen[bytes], deadline_s: float) -> float | None:
    """Seconds the process took to exit, or None if it outlived `deadline_s`."""
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        if proc.poll() is not None:
            return time.monotonic() - started
        time.sleep(0.02)  # polling against the deadline above, not a synchronising wait
    return None


def _stop_once(tmp_path: Path, run: int) -> float:
    port, metadata_port = free_port(), free_port()
    data = tmp_path / f"run{run}"
    log = tmp_path / f"run{run}.log"
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONFAULTHANDLER": "1",
        "SKIFF_SHUTDOWN_TIMEOUT_MS": str(SHUTDOWN_TIMEOUT_MS),
        "SKIFF_DEFAULT_PARTITIONS": "3",
    }
    args = ["playground", "--host", "127.0.0.1", "--data-dir", str(data), "--port", str(port)]
    args += ["--metadata-port", str(metadata_port), "--compaction-interval-ms", "300"]
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "skiff.cli", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )
    try:
        wait_for_port(port, proc, log)
        bootstrap = f"127.0.0.1:{port}"
        topic = f"stop-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, partitions=3)
        flowing = threading.Event()
        with _running_clients(bootstrap, topic, flowing):
            assert flowing.wait(30), f"no record consumed:\n{log.read_text()}"
            proc.send_signal(signal.SIGTERM)
            took_s = _wait_gone(proc, GRACE_S)
        if took_s is None:
            proc.send_signal(signal.SIGABRT)  # the faulthandler prints every thread's stack
            proc.wait(10)
            pytest.fail(f"run {run}: still alive {GRACE_S}s after SIGTERM:\n{log.read_text()}")
        assert proc.returncode == 0, f"run {run}: exit code {proc.returncode}:\n{log.read_text()}"
        assert "stopped cleanly" in log.read_text()
        return took_s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_playground_exits_after_sigterm_under_load(tmp_path: Path) -> None:
    took = [_stop_once(tmp_path, run) for run in range(RUNS)]
    assert max(took) < GRACE_S
