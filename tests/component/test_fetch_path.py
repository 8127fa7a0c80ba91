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
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition
from skiff.agent.config import AgentConfig
from skiff.agent.runtime import RunningAgent, start_agent
from skiff.fileformat.batch_header import iter_batches
from skiff.fileformat.objectstore import open_async_store
from skiff.fileformat.record_build import build_batch
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import FetchQuery

from tests.component.fake_metadata import FlakyMetadataClient
from tests.support.kafka_wire import KafkaWire, fetch_request, produce_request, send_request
from tests.support.spies import parked_fetches


@asynccontextmanager
async def _agent(tmp_path: Path, **config: Any) -> AsyncIterator[tuple[RunningAgent, FlakyMetadataClient]]:
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = FlakyMetadataClient(LocalMetadataClient(service, owns_service=True))
    store = open_async_store(f"memory://fetch-{uuid.uuid4().hex}")
    cfg = AgentConfig.from_env({}, agent_id="a1", host="127.0.0.1", port=0, flush_interval_ms=20, **config)
    running = await start_agent(cfg, md, store)  # type: ignore[arg-type]
    try:
        yield running, md
    finally:
        await running.close()


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[tuple[RunningAgent, FlakyMetadataClient]]:
    async with _agent(tmp_path) as running:
        yield running


async def test_tail_consumer_is_served_from_own_commits(tmp_path: Path) -> None:
    # A tail known from this agent's own commit is trusted for `fetch_poll_interval_ms`
    # without asking metadata; a busy machine can delay the consumer's next fetch past the
    # default 100 ms and make it ask once. What this test checks is where the locations and
    # bytes come from, so the trust window is made longer than the test.
    async with _agent(tmp_path, fetch_poll_interval_ms=60_000) as (running, md):
        await _tail_consumer_is_served_from_own_commits(running, md)


async def _tail_consumer_is_served_from_own_commits(running: RunningAgent, md: FlakyMetadataClient) -> None:
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
        woken_before, expired_before = running.watch.parked_woken, running.watch.parked_expired
        with parked_fetches(running.watch) as parkings:
            for i in range(10):
                pending = asyncio.create_task(consumer.getone())
                # the consumer's fetch is now waiting at the tail (long poll)
                await asyncio.to_thread(parkings.wait_until, lambda: running.watch.waiting > 0)
                await producer.send_and_wait("tail", f"v{i}".encode())
                msg = await asyncio.wait_for(pending, 10)
                assert (msg.offset, msg.value) == (i + 1, f"v{i}".encode())
        # every record came back because its commit woke the parked fetch, none because the
        # fetch's max wait (5 s) ran out: one wake per record, no expiry ...
        assert running.watch.parked_woken - woken_before == 10
        assert running.watch.parked_expired == expired_before
        # ... and neither metadata nor the bucket was asked: locations and bytes came from
        # this agent's own commits
        assert md.calls.count("find_chunks") == find_before
        assert running.store.stats.snapshot().requests.get("get_range", 0) == gets_before
    finally:
        await producer.stop()
        await consumer.stop()


def bucket_gets(running: RunningAgent) -> int:
    """GETs of object bytes: ranged ones, and the open-ended ones with which a connection's
    first fetch reads a cold file to its end (agent.handlers.fetch)."""
    requests = running.store.stats.snapshot().requests
    return requests.get("get_range", 0) + requests.get("stream_get", 0)


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
    running.cache.clear()

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

    gets0 = bucket_gets(running)
    first = await asyncio.wait_for(read_all(), 30)
    gets1 = bucket_gets(running)
    second = await asyncio.wait_for(read_all(), 30)
    gets2 = bucket_gets(running)
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
        with parked_fetches(agents[0].watch) as parkings:
            parked = asyncio.ensure_future(asyncio.to_thread(_raw_fetch, a, "idle", 1, 20_000))
            await asyncio.to_thread(parkings.wait_for, 1)  # the fetch waits at the tail
        assert await asyncio.to_thread(_raw_produce, b, "idle", b"second") == 1
        code, records = await asyncio.wait_for(parked, 15)
        assert code == 0 and [h.base_offset for _, h in iter_batches(records)] == [1]
    finally:
        for x in agents:
            await x.close()


def _fetch_many(bootstrap: str, topic: str, parts: list[tuple[int, int, int]], max_bytes: int) -> list[bytes]:
    req = fetch_request(topic, parts, max_wait_ms=0, max_bytes=max_bytes)
    resp = send_request(bootstrap, req, timeout_s=30).parse().responses[0]
    assert all(int(p.error_code) == 0 for p in resp.partitions)
    return [bytes(p.records or b"") for p in resp.partitions]


async def test_one_fetch_of_many_partitions_reads_each_file_with_one_get(
    agent: tuple[RunningAgent, FlakyMetadataClient],
) -> None:
    """Ten partitions written in one produce request share one file; a cold fetch of all of
    them reads their ten chunks with one ranged GET (they are within the coalescing gap)."""
    running, md = agent
    await md.create_topic("wide", 10, {})
    bootstrap = f"127.0.0.1:{running.port}"
    batches = {p: build_batch([(i, 1, None, f"p{p}-{i}".encode(), ()) for i in range(3)]) for p in range(10)}
    req = produce_request("wide", batches)
    resp = (await asyncio.to_thread(send_request, bootstrap, req, timeout_s=30)).parse()
    assert all(int(p.error_code) == 0 for p in resp.responses[0].partition_responses)
    running.cache.clear()
    gets0 = bucket_gets(running)
    records = await asyncio.to_thread(
        _fetch_many, bootstrap, "wide", [(p, 0, 1 << 20) for p in range(10)], 1 << 20
    )
    assert bucket_gets(running) - gets0 == 1
    assert [bytes(r) for r in records] == [batches[p] for p in range(10)]  # offsets 0..2 each, as sent


async def test_a_narrow_first_fetch_reads_cold_files_whole_so_the_wide_one_needs_no_get(
    agent: tuple[RunningAgent, FlakyMetadataClient],
) -> None:
    """A consumer's first Fetch may name only partition 0 (librdkafka's, under load); it
    reads each cold file it touches to the end, so the next Fetch, naming all ten
    partitions, finds everything cached: one GET per file. On the same connection later,
    a narrow fetch of cold files reads only its chunks (a second Fetch is not widened)."""
    running, md = agent
    await md.create_topic("narrow", 10, {})
    bootstrap = f"127.0.0.1:{running.port}"
    for n in range(2):  # two files, each with a chunk of every partition
        batches = {p: build_batch([(0, 1, None, f"f{n}-p{p}".encode(), ())]) for p in range(10)}
        req = produce_request("narrow", batches)
        resp = (await asyncio.to_thread(send_request, bootstrap, req, timeout_s=30)).parse()
        assert all(int(p.error_code) == 0 for p in resp.responses[0].partition_responses)
    running.cache.clear()

    def fetches() -> tuple[int, int, int, int]:
        with KafkaWire(bootstrap, timeout_s=30) as wire:
            g0 = bucket_gets(running)
            narrow = fetch_request("narrow", [(0, 0, 1 << 20)], max_wait_ms=0, max_bytes=1 << 20)
            assert int(wire.request(narrow).parse().responses[0].partitions[0].error_code) == 0
            g1 = bucket_gets(running)
            wide = fetch_request(
                "narrow", [(p, 0, 1 << 20) for p in range(10)], max_wait_ms=0, max_bytes=1 << 20
            )
            parts = wire.request(wide).parse().responses[0].partitions
            assert [int(p.error_code) for p in parts] == [0] * 10
            g2 = bucket_gets(running)
            running.cache.clear()  # cold again, same connection: its next fetches read by chunks
            wire.request(narrow)
            g3 = bucket_gets(running)
            wire.request(wide)
            return g1 - g0, g2 - g1, g3 - g2, bucket_gets(running) - g3

    first, wide, later_narrow, later_wide = await asyncio.to_thread(fetches)
    assert (first, wide) == (2, 0)  # the two files read whole by the first fetch, once each
    assert running.cache.to_end_loads == 2
    assert (later_narrow, later_wide) == (2, 2)  # not the first fetch: chunks, then the rest


async def test_consuming_many_partitions_reads_each_file_about_once(tmp_path: Path) -> None:
    """Eight files each holding a chunk of each of 10 partitions (keyed traffic); one
    consumer of all 10 reads everything with fetches of room for two files, read-ahead
    off. Serving the partitions in request order would touch every file in every fetch
    (8 GETs per fetch, 40 in all); the fetch is planned by object instead: a fetch reads
    the files it serves, at most one of them partly, so at most files + fetches GETs."""
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = LocalMetadataClient(service, owns_service=True)
    store = open_async_store(f"memory://wide-{uuid.uuid4().hex}")
    cfg = AgentConfig.from_env(
        {}, agent_id="w", host="127.0.0.1", port=0, flush_interval_ms=20, fetch_readahead_bytes=0
    )
    running = await start_agent(cfg, md, store)
    bootstrap = f"127.0.0.1:{running.port}"
    files = 8
    try:
        await md.create_topic("keyed", 10, {})
        sent: dict[int, bytes] = {p: b"" for p in range(10)}
        for _ in range(files):  # one produce request, one file, a batch of each partition
            batches = {p: build_batch([(i, 1, None, b"v" * 1000, ()) for i in range(3)]) for p in range(10)}
            resp = (
                await asyncio.to_thread(
                    send_request, bootstrap, produce_request("keyed", batches), timeout_s=30
                )
            ).parse()
            assert all(int(p.error_code) == 0 for p in resp.responses[0].partition_responses)
            for p in range(10):
                sent[p] += batches[p]
        assert running.buffer.files_flushed == files
        file_bytes = 10 * len(batches[0])
        running.cache.clear()
        gets0 = running.store.stats.snapshot().requests.get("get_range", 0)
        offsets = dict.fromkeys(range(10), 0)
        got = dict.fromkeys(range(10), 0)
        fetches = 0
        while any(o < 3 * files for o in offsets.values()):
            fetches += 1
            parts = [(p, offsets[p], 1 << 20) for p in range(10)]
            answers = await asyncio.to_thread(_fetch_many, bootstrap, "keyed", parts, 2 * file_bytes)
            assert sum(len(a) for a in answers) <= 2 * file_bytes
            for p, records in enumerate(answers):
                offsets[p] += 3 * len(records) // len(batches[0])
                got[p] += len(records)
            assert fetches <= 2 * files
        gets = running.store.stats.snapshot().requests.get("get_range", 0) - gets0
        assert got == {p: len(sent[p]) for p in range(10)}
        assert gets <= files + fetches, (gets, files, fetches)
    finally:
        await running.close()


async def test_fetch_sizes_are_capped_by_the_agent(tmp_path: Path) -> None:
    """fetch_max_bytes caps a request's max_bytes and max_partition_fetch_bytes each
    partition's, whatever the client asks for; a first batch above both still comes (KIP-74)."""
    batch = build_batch([(0, 1, None, b"x" * 1000, ())])
    size = len(batch)
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = LocalMetadataClient(service, owns_service=True)
    store = open_async_store(f"memory://caps-{uuid.uuid4().hex}")
    cfg = AgentConfig.from_env(
        {},
        agent_id="caps",
        host="127.0.0.1",
        port=0,
        flush_interval_ms=20,
        fetch_max_bytes=5 * size,
        max_partition_fetch_bytes=3 * size,
    )
    running = await start_agent(cfg, md, store)
    bootstrap = f"127.0.0.1:{running.port}"
    try:
        await md.create_topic("caps", 2, {})
        for _ in range(4):
            req = produce_request("caps", {0: batch, 1: batch})
            await asyncio.to_thread(send_request, bootstrap, req, timeout_s=30)
        everything = [(0, 0, 1 << 30), (1, 0, 1 << 30)]
        p0, p1 = await asyncio.to_thread(_fetch_many, bootstrap, "caps", everything, 1 << 30)
        assert (len(p0), len(p1)) == (3 * size, 2 * size)  # 3 by the partition cap, 2 left of 5
        (p0,) = await asyncio.to_thread(_fetch_many, bootstrap, "caps", [(0, 0, 1)], 1)
        assert len(p0) == size  # the first batch always comes
    finally:
        await running.close()


async def test_list_offsets_answers_the_exact_record(agent: tuple[RunningAgent, FlakyMetadataClient]) -> None:
    """Timestamps 100, 400, 200 in one batch: MAX_TIMESTAMP is the second record (not the
    batch's last offset), and a timestamp query answers the first record at or after it
    inside the chunk, through confluent-kafka's own calls."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    running, md = agent
    await md.create_topic("times", 1, {})
    bootstrap = f"127.0.0.1:{running.port}"

    def produce(stamps: list[int]) -> None:
        batch = build_batch([(i, ts, None, f"at-{ts}".encode(), ()) for i, ts in enumerate(stamps)])
        resp = send_request(bootstrap, produce_request("times", {0: batch}), timeout_s=30).parse()
        assert int(resp.responses[0].partition_responses[0].error_code) == 0

    def max_timestamp() -> tuple[int, int]:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        tp = CTopicPartition("times", 0)
        info = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(15)
        return info.offset, info.timestamp

    def for_times(stamps: list[int]) -> list[int]:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "times"})
        try:
            # one partition per call: a list naming one partition twice is not a valid request
            return [
                consumer.offsets_for_times([CTopicPartition("times", 0, ts)], 15)[0].offset for ts in stamps
            ]
        finally:
            consumer.close()

    await asyncio.to_thread(produce, [100, 400, 200])
    assert await asyncio.to_thread(max_timestamp) == (1, 400)
    await asyncio.to_thread(produce, [50, 500, 450])
    running.cache.clear()  # the chunk is read from the bucket
    assert await asyncio.to_thread(max_timestamp) == (4, 500)
    assert await asyncio.to_thread(for_times, [0, 100, 101, 150, 400, 401, 460, 500, 501]) == [
        0,
        0,
        1,
        1,
        1,
        4,
        4,
        4,
        -1,
    ]


async def test_corrupt_batch_in_the_bucket_is_refused_not_served(
    agent: tuple[RunningAgent, FlakyMetadataClient], caplog: pytest.LogCaptureFixture
) -> None:
    """A bit flipped in a stored batch: the partition answers KAFKA_STORAGE_ERROR and the
    log names the object and the batch's position; the other partition is still served."""
    running, md = agent
    await md.create_topic("flip", 2, {})
    bootstrap = f"127.0.0.1:{running.port}"
    batches = {p: build_batch([(0, 1, None, f"value-{p}".encode() * 10, ())]) for p in range(2)}
    req = produce_request("flip", batches)
    await asyncio.to_thread(send_request, bootstrap, req, timeout_s=30)
    keys = [info.key async for info in running.store.list("segments/")]
    (key,) = keys
    blob = bytearray(await running.store.get(key))
    batch_position = bytes(blob).index(batches[0])
    at = bytes(blob).index(b"value-0")
    blob[at] ^= 0x01  # inside partition 0's record: only its CRC-32C can tell
    await running.store.put(key, bytes(blob))
    running.cache.clear()
    req = fetch_request("flip", [(0, 0, 1 << 20), (1, 0, 1 << 20)], max_bytes=1 << 20)
    resp = (await asyncio.to_thread(send_request, bootstrap, req, timeout_s=30)).parse()
    p0, p1 = resp.responses[0].partitions
    # KAFKA_STORAGE_ERROR, with an empty record set, not a null one (librdkafka cannot
    # parse size -1 and would drop the error)
    assert int(p0.error_code) == 56 and p0.records is not None and bytes(p0.records) == b""
    assert int(p1.error_code) == 0 and bytes(p1.records) == batches[1]
    (line,) = [r.getMessage() for r in caplog.records if "corrupt" in r.getMessage()]
    assert f"object {key} at byte {batch_position}:" in line and "CRC-32C" in line


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
async def test_agent_learns_the_locations_metadata_records(tmp_path: Path, timestamp_type: str) -> None:
    """What the agent caches from its own commits is metadata's answer, field for field:
    the same chunk ids, byte ranges, offsets and max_timestamp that find_chunks returns
    (on a LogAppendTime topic the broker's clock, not the producer's timestamps)."""
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = LocalMetadataClient(service, owns_service=True)
    cfg = AgentConfig.from_env({}, agent_id="a1", host="127.0.0.1", port=0, flush_interval_ms=20)
    store = open_async_store(f"memory://learn-{uuid.uuid4().hex}")
    running = await start_agent(cfg, md, store)
    try:
        topic = await md.create_topic("learn", 1, {"message.timestamp.type": timestamp_type})
        bootstrap = f"127.0.0.1:{running.port}"
        assert await asyncio.to_thread(_raw_produce, bootstrap, "learn", b"first") == 0
        assert (await asyncio.to_thread(_raw_fetch, bootstrap, "learn", 0, 0))[1]  # the cache knows it
        for i in range(3):  # each produce is one commit: the cache extends from its answer
            assert await asyncio.to_thread(_raw_produce, bootstrap, "learn", b"v%d" % i) == i + 1
        key = (topic.topic_id, 0)
        cached = running.context.parts.chunk_locations.lookup(key, 0, 1 << 30)
        assert cached is not None and cached.high_watermark == 4
        (truth,) = await md.find_chunks([FetchQuery(topic.topic_id, 0, 0, 1 << 30)])
        assert cached.chunks == truth.chunks
        assert len(truth.chunks) == 4 and all(c.chunk_id > 0 for c in truth.chunks)
    finally:
        await running.close()


async def test_log_append_time_topic_acks_with_the_broker_time(
    agent: tuple[RunningAgent, FlakyMetadataClient],
) -> None:
    """A LogAppendTime topic: every produce is acked (kio's TZAware would refuse any append
    time with a sub-second part) with the agent's time in milliseconds, and the delivery
    reports of a real client carry it as LOG_APPEND_TIME."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Producer

    running, md = agent
    await md.create_topic("lat", 1, {"message.timestamp.type": "LogAppendTime"})
    bootstrap = f"127.0.0.1:{running.port}"
    before_ms = int(time.time() * 1000)

    def produce() -> list[tuple[str | None, int, int]]:
        reports: list[tuple[str | None, int, int]] = []
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i in range(20):
            p.produce(
                "lat",
                value=b"v%d" % i,
                timestamp=1000 + i,  # the producer's CreateTime, replaced by the broker's
                on_delivery=lambda err, msg: reports.append(
                    (None if err is None else str(err), *msg.timestamp())
                ),
            )
            p.poll(0)
            if i % 5 == 4:
                p.flush(30)
        assert p.flush(30) == 0
        return reports

    reports = await asyncio.to_thread(produce)
    after_ms = int(time.time() * 1000)
    assert len(reports) == 20
    assert all(err is None for err, _, _ in reports), reports
    assert all(kind == TIMESTAMP_LOG_APPEND_TIME and before_ms <= ts <= after_ms for _, kind, ts in reports)
    assert any(ts % 1000 for _, _, ts in reports)  # sub-second append times were answered
