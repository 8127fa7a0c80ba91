"""An agent logs state changes, not activity (issue 21): one agent with the compaction role
(its maintenance loop in the agent's process, as `skiff agent --roles kafka,compaction`
runs it) over a metadata service in this process (SQLite) and a memory:// bucket, with
every periodic task on a 20 ms interval (heartbeats, transaction scans, readiness probes,
maintenance passes), so a second of idling covers what an hour would at the defaults.

- Idle, nothing at INFO or above, over at least 10 heartbeats, 10 transaction scans, 10
  readiness probes and 5 maintenance passes.
- The bucket failing: one ERROR line (`agent q not ready: ...`) however many probes fail;
  back: one INFO line (`agent q ready again after ...`).
- A consumer group: its coordinator taking it (`coordinator lease acquired`) and the
  rebalance that gives the member its partitions are logged; its heartbeats are not.
- Compaction: the pass that cleans a compacted topic logs one line when it claims the job,
  one summary line when the job is done, one GC line (the replaced files deleted, grace 0)
  and the pass's own line; the passes after it, idle again, log nothing at INFO.

The test waits on the events themselves (metadata calls counted by the client's
`observe_call` hook, the bucket's PUTs, the loop's `on_pass`), never on time alone.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import uuid
from collections import Counter
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, Producer
from skiff.agent.config import AgentConfig
from skiff.agent.runtime import RunningAgent, start_agent
from skiff.compactor.maintenance_loop import MaintenanceLoop
from skiff.compactor.pass_summary import PassSummary
from skiff.compactor.planner import PlannerConfig
from skiff.compactor.runner import RunnerConfig
from skiff.fileformat.objectstore import open_store
from skiff.fileformat.objectstore.errors import StorageError
from skiff.fileformat.objectstore.memory import AsyncMemoryStore
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService

T = TypeVar("T")
HOLDER = "agent-q"
FAST_MS = 20
TIMEOUT_S = 30


class Events:
    """Counts of what the agent did (metadata calls by operation, bucket PUTs, maintenance
    passes), with a wait for a count to grow."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.counts: Counter[str] = Counter()

    def hit(self, name: str) -> None:
        with self._cond:
            self.counts[name] += 1
            self._cond.notify_all()

    def wait_more(self, **more: int) -> None:
        """Until each named count has grown by its number from now."""
        with self._cond:
            want = {name: self.counts[name] + n for name, n in more.items()}
            done = self._cond.wait_for(
                lambda: all(self.counts[k] >= v for k, v in want.items()), timeout=TIMEOUT_S
            )
            assert done, f"waited for {more}; counts {dict(self.counts)}"


class BreakableStore(AsyncMemoryStore):
    """A memory bucket whose PUTs can be made to fail (as S3's for a bucket that is gone),
    counting PUT attempts (each readiness probe makes one)."""

    def __init__(self, name: str, events: Events) -> None:
        super().__init__(name)
        self.broken = False
        self._events = events

    async def put(self, key: str, data: Any) -> None:
        self._events.hit("put")
        if self.broken:
            raise StorageError("NoSuchBucket: The specified bucket does not exist", key=key)
        await super().put(key, data)


class Stack:
    """The agent, its maintenance loop and metadata, on an event loop in a thread (the Kafka
    clients block the test's thread)."""

    def __init__(self, data_dir: Path) -> None:
        self.events = Events()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="agent-loop", daemon=True)
        self._thread.start()
        self.service = MetadataService.from_url(f"sqlite:///{data_dir / 'm.db'}")
        self.md = LocalMetadataClient(self.service, owns_service=True)
        bucket = f"logs-{uuid.uuid4().hex}"
        self.store = BreakableStore(bucket, self.events)
        config = AgentConfig.from_env(
            {},
            agent_id="q",
            host="127.0.0.1",
            port=0,
            heartbeat_interval_ms=FAST_MS,
            transaction_scan_interval_ms=FAST_MS,
            readiness_probe_interval_ms=FAST_MS,
            flush_interval_ms=FAST_MS,
        )
        self.agent: RunningAgent = self.call(start_agent(config, self.md, self.store))
        observe = self.md.observe_call  # the agent's own latency hook, kept
        assert observe is not None

        def observe_and_count(operation: str, seconds: float) -> None:
            observe(operation, seconds)
            self.events.hit(operation)

        self.md.observe_call = observe_and_count
        runner = RunnerConfig(
            planner=PlannerConfig(holder=HOLDER), key_prefix=f"compacted/{HOLDER}/", gc_grace_ms=0
        )
        self.maintenance = MaintenanceLoop(
            self.md, open_store(f"memory://{bucket}"), runner, interval_ms=FAST_MS, on_pass=self._passed
        )
        self.passes: list[PassSummary] = []
        self.call(self._start_maintenance())
        self.bootstrap = f"127.0.0.1:{self.agent.port}"

    def _passed(self, summary: PassSummary) -> None:
        self.passes.append(summary)
        self.events.hit("pass")
        if summary.jobs:
            self.events.hit("job_pass")

    async def _start_maintenance(self) -> None:
        self.maintenance.start()
        self.agent.background.append(self.maintenance)  # closed with the agent

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(TIMEOUT_S)

    def close(self) -> None:
        self.call(self.agent.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(TIMEOUT_S)
        self.loop.close()


@pytest.fixture
def stack(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Iterator[Stack]:
    caplog.set_level(logging.INFO)
    s = Stack(tmp_path)
    try:
        yield s
    finally:
        s.close()


def _lines_since(caplog: pytest.LogCaptureFixture, mark: int, level: int = logging.INFO) -> list[str]:
    return [f"{r.levelname} {r.name}: {r.getMessage()}" for r in caplog.records[mark:] if r.levelno >= level]


def _idle(stack: Stack, heartbeats: int = 10, passes: int = 5) -> None:
    """At least `heartbeats` heartbeats, transaction scans and readiness probes (one PUT
    each), and `passes` maintenance passes, from now."""
    stack.events.wait_more(
        heartbeat_agent=heartbeats, expire_txns=heartbeats, put=heartbeats, **{"pass": passes}
    )


def _matches(lines: list[str], patterns: list[str]) -> bool:
    return len(lines) == len(patterns) and all(
        re.fullmatch(p, line) for p, line in zip(patterns, lines, strict=True)
    )


def _readiness_flips(stack: Stack, caplog: pytest.LogCaptureFixture) -> None:
    mark = len(caplog.records)
    stack.store.broken = True
    stack.events.wait_more(put=10, heartbeat_agent=3)  # ten failed probes
    broken = _lines_since(caplog, mark)
    assert _matches(
        broken, [r"ERROR skiff\.agent\.health: agent q not ready: bucket memory://\S+: PUT .*NoSuchBucket.*"]
    )
    stack.store.broken = False
    mark = len(caplog.records)
    stack.events.wait_more(put=10, heartbeat_agent=3)  # ten good ones
    recovered = _lines_since(caplog, mark)
    assert _matches(recovered, [r"INFO skiff\.agent\.health: agent q ready again after [\d.]+ s: .*"])


def _consumer_group(stack: Stack, caplog: pytest.LogCaptureFixture) -> None:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    stack.call(stack.md.create_topic(topic, 2, {}))
    mark = len(caplog.records)
    consumer = Consumer(
        {
            "bootstrap.servers": stack.bootstrap,
            "group.id": "g1",
            "heartbeat.interval.ms": 50,
            "session.timeout.ms": 6000,
        }
    )
    assigned = threading.Event()
    consumer.subscribe([topic], on_assign=lambda _c, _parts: assigned.set())
    while not assigned.is_set():
        consumer.poll(0.05)
    assert _matches(
        _lines_since(caplog, mark),
        [
            r"INFO skiff\.agent\.groups\.fencing: group g1: coordinator lease acquired \(epoch 1\)",
            r"INFO skiff\.agent\.groups\.rebalance: group g1: preparing to rebalance \(generation 0, new member \S+ joined\)",
            r"INFO skiff\.agent\.groups\.rebalance: group g1: generation 1 with 1 member\(s\), protocol range",
        ],
    ), _lines_since(caplog, mark)
    mark = len(caplog.records)
    probes = stack.events.counts["put"]
    while stack.events.counts["put"] < probes + 10:  # ten probes; the member heartbeats every 50 ms
        consumer.poll(0.05)
    _idle(stack, heartbeats=3, passes=2)
    assert _lines_since(caplog, mark) == []  # a live group's heartbeats and fetches log nothing
    consumer.close()
    _idle(stack, heartbeats=3, passes=2)


def _compaction(stack: Stack, caplog: pytest.LogCaptureFixture) -> None:
    topic = f"c-{uuid.uuid4().hex[:8]}"
    day_ms = str(24 * 3600 * 1000)
    configs = {
        "cleanup.policy": "compact",
        "min.compaction.lag.ms": day_ms,
        "min.cleanable.dirty.ratio": "0.01",
    }
    stack.call(stack.md.create_topic(topic, 1, configs))
    mark = len(caplog.records)
    producer = Producer({"bootstrap.servers": stack.bootstrap, "linger.ms": 0})
    for round_ in range(3):  # three files, each key in each
        for k in range(5):
            producer.produce(topic, key=b"k%d" % k, value=b"v%d-%d" % (round_, k))
        assert producer.flush(TIMEOUT_S) == 0
    del producer  # closed before the agent
    stack.call(stack.md.alter_topic_configs(topic, {"min.compaction.lag.ms": "0"}, [], False))
    stack.events.wait_more(job_pass=1)
    lines = _lines_since(caplog, mark)
    runner = r"INFO skiff\.compactor\.runner: "
    assert _matches(
        lines,
        [
            runner
            + rf"compaction: holder {HOLDER} claimed job (\w+): {topic}-0; 3 input file\(s\), 3 chunk\(s\), .*",
            runner
            + rf"compaction: holder {HOLDER} job \w+ done: 1 partition\(s\), 3 file\(s\) in \(\d+ bytes\), "
            r"1 out \(\d+ bytes\), 15 record\(s\) in, 5 out, 10 removed; outputs: compacted/\S+\.seg",
            runner + rf"gc: holder {HOLDER} deleted 3 file\(s\) past their grace and 0 orphan object\(s\)",
            runner + rf"maintenance pass of holder {HOLDER}: 1 job\(s\), 0 failed, .*",
        ],
    ), lines
    mark = len(caplog.records)
    _idle(stack, heartbeats=3, passes=3)
    assert _lines_since(caplog, mark) == []


def test_an_agent_logs_state_changes_not_activity(stack: Stack, caplog: pytest.LogCaptureFixture) -> None:
    stack.events.wait_more(heartbeat_agent=2, **{"pass": 1})  # started: start-up lines are written
    mark = len(caplog.records)
    _idle(stack)
    assert _lines_since(caplog, mark) == []
    _readiness_flips(stack, caplog)
    _consumer_group(stack, caplog)
    _compaction(stack, caplog)
