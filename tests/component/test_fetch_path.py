"""The fetch path in one process: long polls answered by commits, no round trips at the tail
(also for a consumer on another agent than the producer's).

An agent (`agent.runtime.start_agent`) over real metadata (SQLite) and a memory:// bucket;
aiokafka clients on the same event loop. The metadata client is wrapped to count calls.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from agent.chunk_cache import ChunkLocationCache
from agent.config import AgentConfig
from agent.handlers.fetch import CHUNK_CACHE
from agent.runtime import RunningAgent, start_agent
from fileformat.objectstore import open_async_store
from fileformat.records import build_batch, iter_batches
from metadata.local_client import LocalMetadataClient
from metadata.service import MetadataService
from metadata.types import FetchQuery
from tests.component.fake_metadata import FlakyMetadataClient
from tests.support.kafka_wire import fetch_request, produce_request, send_request


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[tuple[RunningAgent, FlakyMetadataClient]]:
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = FlakyMetadataClient(LocalMetadataClient(service, owns_service=True))
    store = open_async_store(f"memory://fetch-{uuid.uuid4().hex}")
    cfg = AgentConfig.from_env({}, agent_id="a1", host="127.0.0.1", port=0, flush_interval_ms=20)
    running = await start_agent(cfg, md, store)  # type: ignore[arg-type]
    try:
        yield running, md
    finally:
        await running.close()


async def test_tail_consumer_is_served_from_own_commits(
    agent: tuple[RunningAgent, FlakyMetadataClient],
) -> None:
    running, md = agent
    await md.create_topic("tail", 1, {})
    bootstrap = f"127.0.0.1:{running.port}"
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=5000, enable_auto_commit=False)
    await producer.start()
    await consumer.start()
    try:
        tp = TopicPartition("tail", 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        await producer.send_and_wait("tail", b"warm-up")
        assert (await asyncio.wait_for(consumer.getone(), 10)).value == b"warm-up"
        find_before = md.calls.count("find_chunks")
        gets_before = running.store.stats.snapshot().requests.get("get_range", 0)
        latencies = []
        for i in range(10):
            pending = asyncio.create_task(consumer.getone())
            await asyncio.sleep(0.2)  # the consumer's fetch is now waiting at the tail (long poll)
            t0 = time.monotonic()
            await producer.send_and_wait("tail", f"v{i}".encode())
            msg = await asyncio.wait_for(pending, 10)
            latencies.append(time.monotonic() - t0)
            assert (msg.offset, msg.value) == (i + 1, f"v{i}".encode())
        # every record came back while the consumer was long-polling (max wait 5 s) ...
        assert max(latencies) < 5
        # ... and neither metadata nor the bucket was asked: locations and bytes came from
        # this agent's own commits
        assert md.calls.count("find_chunks") == find_before
        assert running.store.stats.snapshot().requests.get("get_range", 0) == gets_before
    finally:
        await producer.stop()
        await consumer.stop()


async def test_catch_up_reads_use_ranged_gets_then_cache(
    agent: tuple[RunningAgent, FlakyMetadataClient],
) -> None:
    running, md = agent
    await md.create_topic("cold", 2, {})
    bootstrap = f"127.0.0.1:{running.port}"
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        for i in range(200):
            await producer.send("cold", f"v{i}".encode(), partition=i % 2)
        await producer.flush()
    finally:
        await producer.stop()
    # forget what this agent wrote: reads must come from the bucket
    running.cache._objects.clear()
    running.cache._entries.clear()
    running.cache._bytes = running.cache._object_bytes = 0

    async def read_all() -> list[tuple[int, int, bytes]]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100
        )
        await consumer.start()
        out: list[tuple[int, int, bytes]] = []
        try:
            consumer.assign([TopicPartition("cold", 0), TopicPartition("cold", 1)])
            await consumer.seek_to_beginning()
            while len(out) < 200:
                for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                    out.extend((tp.partition, r.offset, r.value) for r in records)
        finally:
            await consumer.stop()
        return out

    gets0 = running.store.stats.snapshot().requests.get("get_range", 0)
    first = await asyncio.wait_for(read_all(), 30)
    gets1 = running.store.stats.snapshot().requests.get("get_range", 0)
    second = await asyncio.wait_for(read_all(), 30)
    gets2 = running.store.stats.snapshot().requests.get("get_range", 0)
    assert sorted(first) == sorted(second)
    assert sorted(o for p, o, _ in first if p == 0) == list(range(100))
    assert gets1 > gets0  # the cold read went to the bucket
    assert gets2 == gets1  # the warm read did not


def _raw_fetch(bootstrap: str, topic: str, offset: int, max_wait_ms: int) -> tuple[int, bytes]:
    """One Fetch v12 of partition 0 at `offset`: (error code, record bytes)."""
    req = fetch_request(topic, [(0, offset, 1 << 20)], max_wait_ms=max_wait_ms, max_bytes=1 << 20)
    part = send_request(bootstrap, req, timeout_s=30).parse().responses[0].partitions[0]
    return int(part.error_code), bytes(part.records or b"")


def _raw_produce(bootstrap: str, topic: str, value: bytes) -> int:
    req = produce_request(topic, {0: build_batch([(0, 1, None, value, ())])})
    pr = send_request(bootstrap, req, timeout_s=30).parse().responses[0].partition_responses[0]
    assert int(pr.error_code) == 0
    return int(pr.base_offset)


async def test_idle_tail_consumer_on_another_agent_costs_no_metadata_reads(tmp_path: Path) -> None:
    """Agent B takes the writes, agent A serves a consumer at the tail. While A follows
    the partition's commits (the metadata long poll), A's repeated fetches at the tail ask
    metadata nothing; a write through B still reaches the consumer's parked fetch."""
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = FlakyMetadataClient(LocalMetadataClient(service, owns_service=True))
    bucket = f"memory://two-{uuid.uuid4().hex}"
    agents = []
    for name in ("a", "b"):
        cfg = AgentConfig.from_env({}, agent_id=name, host="127.0.0.1", port=0, flush_interval_ms=20)
        agents.append(await start_agent(cfg, md, open_async_store(bucket)))  # type: ignore[arg-type]
    a, b = (f"127.0.0.1:{x.port}" for x in agents)
    try:
        await md.create_topic("idle", 1, {})
        assert await asyncio.to_thread(_raw_produce, b, "idle", b"first") == 0
        assert (await asyncio.to_thread(_raw_fetch, a, "idle", 0, 0))[1]
        # At the tail: the first wait starts following the partition (the long poll).
        assert await asyncio.to_thread(_raw_fetch, a, "idle", 1, 200) == (0, b"")
        topic_id = (await md.describe_topics(["idle"]))["idle"].topic_id
        assert agents[0].watch.confirms_tail((topic_id, 0), 1)
        before = md.calls.count("find_chunks")
        for _ in range(5):
            assert await asyncio.to_thread(_raw_fetch, a, "idle", 1, 200) == (0, b"")
        assert md.calls.count("find_chunks") == before
        parked = asyncio.ensure_future(asyncio.to_thread(_raw_fetch, a, "idle", 1, 20_000))
        await asyncio.sleep(0.3)
        assert await asyncio.to_thread(_raw_produce, b, "idle", b"second") == 1
        code, records = await asyncio.wait_for(parked, 15)
        assert code == 0 and [h.base_offset for _, h in iter_batches(records)] == [1]
    finally:
        for x in agents:
            await x.close()


class _WholeSecondClock:
    """The agent's clock in whole seconds: kio's TZAware (the produce answer's
    log_append_time) refuses datetimes with a sub-second part (reported to the lead)."""

    def wall_ms(self) -> int:
        return int(time.time()) * 1000

    def monotonic(self) -> float:
        return time.monotonic()


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
async def test_agent_learns_the_locations_metadata_records(tmp_path: Path, timestamp_type: str) -> None:
    """What the agent caches from its own commits is metadata's answer, field for field:
    the same chunk ids, byte ranges, offsets and max_timestamp that find_chunks returns
    (on a LogAppendTime topic the broker's clock, not the producer's timestamps)."""
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = LocalMetadataClient(service, owns_service=True)
    cfg = AgentConfig.from_env({}, agent_id="a1", host="127.0.0.1", port=0, flush_interval_ms=20)
    store = open_async_store(f"memory://learn-{uuid.uuid4().hex}")
    running = await start_agent(cfg, md, store, clock=_WholeSecondClock())
    try:
        topic = await md.create_topic("learn", 1, {"message.timestamp.type": timestamp_type})
        bootstrap = f"127.0.0.1:{running.port}"
        assert await asyncio.to_thread(_raw_produce, bootstrap, "learn", b"first") == 0
        assert (await asyncio.to_thread(_raw_fetch, bootstrap, "learn", 0, 0))[1]  # the cache knows it
        for i in range(3):  # each produce is one commit: the cache extends from its answer
            assert await asyncio.to_thread(_raw_produce, bootstrap, "learn", b"v%d" % i) == i + 1
        key = (topic.topic_id, 0)
        cached = running.context.service(CHUNK_CACHE, ChunkLocationCache).lookup(key, 0, 1 << 30)
        assert cached is not None and cached.high_watermark == 4
        (truth,) = await md.find_chunks([FetchQuery(topic.topic_id, 0, 0, 1 << 30)])
        assert cached.chunks == truth.chunks
        assert len(truth.chunks) == 4 and all(c.chunk_id > 0 for c in truth.chunks)
    finally:
        await running.close()
