"""DeleteRecords (Kafka API 21) from confluent-kafka's and kafka-python's admin clients,
against one agent over real metadata (SQLite) and a memory:// bucket: the log start
moves, whole chunks below it go (their files become `deleting`), consumers below it get
OFFSET_OUT_OF_RANGE, and Kafka's per-partition errors come back."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.errors import OffsetOutOfRangeError, PolicyViolationError
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.response import FetchResponse
from skiff.agent import protocol
from skiff.agent.config import AgentConfig
from skiff.agent.runtime import RunningAgent, start_agent
from skiff.fileformat.objectstore import open_async_store

from tests.component.fake_metadata import AgentHarness
from tests.support.kafka_wire import fetch_request, send_request

TIMEOUT = 15


class Harness:
    """An AgentHarness's loop and metadata, with one full agent (produce buffer, fetch
    path) from agent.runtime over a memory:// bucket."""

    def __init__(self, base: Harness, running: RunningAgent) -> None:
        self.base = base
        self.running = running
        self.metadata = base.metadata
        self.service = base.service
        self.bootstrap = f"127.0.0.1:{running.port}"

    def call(self, coro: Any) -> Any:
        return self.base.call(coro)


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    base = AgentHarness(tmp_path_factory.mktemp("delrec")).start(agents=0)
    store = open_async_store(f"memory://delrec-{uuid.uuid4().hex}")
    cfg = AgentConfig.from_env({}, agent_id="a1", host="127.0.0.1", port=0, flush_interval_ms=5)

    async def go() -> RunningAgent:
        return await start_agent(cfg, base.metadata, store)  # type: ignore[arg-type]

    running = base.call(go())
    try:
        yield Harness(base, running)
    finally:
        base.call(running.close())
        base.stop()


def _topic(h: Harness, partitions: int = 1, configs: dict[str, str] | None = None) -> str:
    name = f"dr-{uuid.uuid4().hex[:10]}"
    assert h.metadata is not None
    h.call(h.metadata.create_topic(name, partitions, configs or {}))
    return name


def _produce(h: Harness, topic: str, n: int, partition: int = 0) -> None:
    """n records, each flushed as its own file (one chunk per record)."""
    p = Producer({"bootstrap.servers": h.bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=partition)
        assert p.flush(TIMEOUT) == 0


def _chunk_offsets(h: Harness, topic: str, partition: int = 0) -> list[tuple[int, int]]:
    from skiff.metadata.schema import chunks, topics
    from sqlalchemy import select

    assert h.service is not None
    with h.service.engine.connect() as conn:
        tid = conn.execute(select(topics.c.topic_id).where(topics.c.name == topic)).scalar_one()
        rows = conn.execute(
            select(chunks.c.base_offset, chunks.c.last_offset)
            .where(chunks.c.topic_id == tid, chunks.c.partition == partition)
            .order_by(chunks.c.base_offset)
        ).all()
    return [(r.base_offset, r.last_offset) for r in rows]


def _log_start(h: Harness, topic: str, partition: int = 0) -> int:
    admin = AdminClient({"bootstrap.servers": h.bootstrap})
    from confluent_kafka.admin import OffsetSpec

    res = admin.list_offsets({TopicPartition(topic, partition): OffsetSpec.earliest()})
    return int(next(iter(res.values())).result(TIMEOUT).offset)


def test_confluent_delete_records_moves_log_start_and_drops_chunks(harness: Harness) -> None:
    topic = _topic(harness)
    _produce(harness, topic, 5)
    assert _chunk_offsets(harness, topic) == [(i, i) for i in range(5)]
    admin = AdminClient({"bootstrap.servers": harness.bootstrap})

    fut = admin.delete_records([TopicPartition(topic, 0, 3)])
    result = next(iter(fut.values())).result(TIMEOUT)
    assert result.low_watermark == 3  # the new low watermark
    assert _log_start(harness, topic) == 3
    assert _chunk_offsets(harness, topic) == [(3, 3), (4, 4)]

    # A fetch below the log start is refused with OFFSET_OUT_OF_RANGE (and the log start).
    raw = send_request(harness.bootstrap, fetch_request(topic, [(0, 1, 1 << 20)]))
    _, resp = protocol.decode_response(raw.header + raw.body, FetchResponse)
    part = resp.responses[0].partitions[0]
    assert (part.error_code, part.log_start_offset, part.high_watermark) == (
        ErrorCode.offset_out_of_range,
        3,
        5,
    )
    # -1 truncates to the high watermark; a lower offset than the log start is a no-op.
    fut = admin.delete_records([TopicPartition(topic, 0, -1)])
    assert next(iter(fut.values())).result(TIMEOUT).low_watermark == 5
    assert _chunk_offsets(harness, topic) == []
    fut = admin.delete_records([TopicPartition(topic, 0, 2)])
    assert next(iter(fut.values())).result(TIMEOUT).low_watermark == 5


def test_confluent_delete_records_errors(harness: Harness) -> None:
    topic = _topic(harness)
    _produce(harness, topic, 2)
    admin = AdminClient({"bootstrap.servers": harness.bootstrap})
    fut = admin.delete_records([TopicPartition(topic, 0, 10)])
    with pytest.raises(KafkaException) as info:
        next(iter(fut.values())).result(TIMEOUT)
    assert info.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    assert _log_start(harness, topic) == 0
    assert _chunk_offsets(harness, topic) == [(0, 0), (1, 1)]


def test_kafka_python_delete_records(harness: Harness) -> None:
    topic = _topic(harness, partitions=2)
    _produce(harness, topic, 4, partition=0)
    _produce(harness, topic, 2, partition=1)
    compacted = _topic(harness, configs={"cleanup.policy": "compact"})
    admin = KafkaAdminClient(bootstrap_servers=harness.bootstrap, request_timeout_ms=TIMEOUT * 1000)
    try:
        out = admin.delete_records({KpTopicPartition(topic, 0): 2, KpTopicPartition(topic, 1): -1})
        assert out[KpTopicPartition(topic, 0)]["low_watermark"] == 2
        assert out[KpTopicPartition(topic, 1)]["low_watermark"] == 2
        assert _chunk_offsets(harness, topic, 0) == [(2, 2), (3, 3)]
        assert _chunk_offsets(harness, topic, 1) == []
        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({KpTopicPartition(topic, 0): 99})
        with pytest.raises(PolicyViolationError):
            admin.delete_records({KpTopicPartition(compacted, 0): 0})
    finally:
        admin.close()


def test_files_left_without_chunks_become_deleting(harness: Harness, tmp_path: Path) -> None:
    from skiff.metadata.schema import FILE_DELETING, chunks, files
    from sqlalchemy import select

    topic = _topic(harness)
    _produce(harness, topic, 3)
    assert harness.service is not None
    with harness.service.engine.connect() as conn:
        before = {
            r.file_id for r in conn.execute(select(chunks.c.file_id).where(chunks.c.last_offset < 2)).all()
        }
    admin = AdminClient({"bootstrap.servers": harness.bootstrap})
    next(iter(admin.delete_records([TopicPartition(topic, 0, 2)]).values())).result(TIMEOUT)
    with harness.service.engine.connect() as conn:
        states = dict(conn.execute(select(files.c.id, files.c.state).where(files.c.id.in_(before))).all())
    mine = [fid for fid in before if fid in states]
    assert mine and all(states[f] == FILE_DELETING for f in mine[:2])
