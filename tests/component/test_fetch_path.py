"""The fetch path in one process: long polls answered by commits, no round trips at the tail.

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

from agent.config import AgentConfig
from agent.runtime import RunningAgent, start_agent
from fileformat.objectstore import open_async_store
from metadata.client import LocalMetadataClient
from metadata.service import MetadataService
from tests.component.fake_metadata import FlakyMetadataClient


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
