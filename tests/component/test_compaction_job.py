"""A compaction job over files written by the real produce path, on moto's S3 server.

An agent (real metadata on SQLite, a bucket on moto's server) takes keyed updates and
tombstones from aiokafka producers over several flushes (many agent files, a compacted
and a delete-policy topic). The job runs with metadata's real `replace_chunks`; then:
two GETs per input file, counted by the store and, independently, by moto's request
log, and nothing else read; a consumer through the agent sees each key's latest value
(or tombstone) at its original offset, and the delete-policy topic unchanged; the job's
progress callback counts exactly the bytes the streams received.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition
from skiff.agent.config import AgentConfig
from skiff.agent.runtime import RunningAgent, start_agent
from skiff.compactor.job import planned_stream_bytes, run_job
from skiff.compactor.output import Checkpoint
from skiff.compactor.plan import InputChunk, InputFile, JobPlan, PartitionWork
from skiff.fileformat.objectstore import open_async_store, open_store
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import FetchQuery, FileSpec, OutputChunk

from tests.support.s3servers import S3Bucket


@pytest.fixture
async def agent(
    tmp_path: Path, moto_s3: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[RunningAgent, MetadataService]]:
    moto_s3.setenv(monkeypatch)
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = LocalMetadataClient(service, owns_service=True)
    store = open_async_store(moto_s3.url(), endpoint_url=moto_s3.endpoint_url)
    cfg = AgentConfig.from_env({}, agent_id="a1", host="127.0.0.1", port=0, flush_interval_ms=20)
    running = await start_agent(cfg, md, store)  # type: ignore[arg-type]
    try:
        yield running, service
    finally:
        await running.close()


async def _consume(
    bootstrap: str, topic: str, partition: int, end: int
) -> list[tuple[int, bytes | None, bytes | None]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    out = []
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=2000)
            out += [(m.offset, m.key, m.value) for m in batch.get(tp, [])]
    finally:
        await consumer.stop()
    return out


def _plan(
    service: MetadataService,
    store_size: dict[str, int],
    parts: Sequence[tuple[uuid.UUID, str, int, bool]],
    now_ms: int,
) -> JobPlan:
    by_file: dict[str, list[InputChunk]] = {}
    works = []
    for topic_id, name, partition, compact in sorted(parts, key=lambda p: (p[0].bytes, p[2])):
        (info,) = service.find_chunks([FetchQuery(topic_id, partition, 0, 1 << 40)])
        for loc in info.chunks:
            by_file.setdefault(loc.object_key, []).append(InputChunk(topic_id, partition, loc))
        works.append(
            PartitionWork(topic_id, partition, name, compact, not compact, 0, info.high_watermark, 86_400_000)
        )
    files = tuple(
        InputFile(k, store_size[k], tuple(sorted(v, key=lambda c: c.location.byte_position)))
        for k, v in sorted(by_file.items())
    )
    return JobPlan("job1", files, tuple(works), now_ms)


async def test_compaction_of_agent_files_keeps_latest_values_with_two_gets_per_file(
    agent: tuple[RunningAgent, MetadataService], moto_s3: S3Bucket
) -> None:
    running, service = agent
    bootstrap = f"127.0.0.1:{running.port}"
    md = LocalMetadataClient(service)
    compacted = await md.create_topic("table", 2, {"cleanup.policy": "compact"})
    logged = await md.create_topic("events", 1, {})
    rng = random.Random(3)
    latest: dict[tuple[int, bytes], tuple[int, bytes | None]] = {}
    events: list[tuple[int, bytes]] = []
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        for round_no in range(8):  # separate flushes: many agent files
            futures = []
            for i in range(40):
                key = b"k%d" % rng.randrange(25)
                value = None if rng.random() < 0.15 else b"v%d-%d" % (round_no, i)
                futures.append((key, value, await producer.send("table", value, key=key, partition=i % 2)))
                futures.append(
                    (b"e", b"%d-%d" % (round_no, i), await producer.send("events", b"%d-%d" % (round_no, i)))
                )
            for key, value, fut in futures:
                md_ = await fut
                if md_.topic == "table":
                    latest[(md_.partition, key)] = (md_.offset, value)
                else:
                    events.append((md_.offset, value))  # type: ignore[arg-type]
            await producer.flush()
    finally:
        await producer.stop()

    store = open_store(moto_s3.url(), endpoint_url=moto_s3.endpoint_url)
    sizes = {o.key: o.size for o in store.list()}
    parts = [
        (compacted.topic_id, "table", 0, True),
        (compacted.topic_id, "table", 1, True),
        (logged.topic_id, "events", 0, False),
    ]
    plan = _plan(service, sizes, parts, now_ms=1_000)
    assert len(plan.files) >= 3
    # the agent's chunks know their oldest record (Spark's upper time bounds prune with it)
    input_mins: dict[tuple[uuid.UUID, int], set[int]] = {}
    for f in plan.files:
        for c in f.chunks:
            low = c.location.min_timestamp
            assert low is not None and 0 < low <= c.location.max_timestamp
            input_mins.setdefault((c.topic_id, c.partition), set()).add(low)
    checkpoints: list[Checkpoint] = []

    def swap(
        ids: Sequence[int], file: FileSpec, outputs: Sequence[OutputChunk], cps: Sequence[Checkpoint]
    ) -> None:
        service.replace_chunks(ids, file, outputs)
        checkpoints.extend(cps)

    read: dict[str, int] = {"A": 0, "B": 0}

    def on_read(stream: str, nbytes: int) -> None:
        read[stream] += nbytes

    before = store.stats.snapshot()
    moto_s3.server.start_recording()
    result = await asyncio.to_thread(run_job, plan, store, swap, on_read=on_read)
    recorded = moto_s3.server.stop_recording()
    used = store.stats.snapshot() - before

    # progress within the job: the bytes streams A and B consumed are what the store
    # received (counted on the way, no request added), within the planned most
    assert read["A"] > 0 and read["B"] > 0
    assert read["A"] + read["B"] == used.bytes_in <= planned_stream_bytes(plan)

    # the store's own counters: stream GETs only, two per file holding compacted data
    assert set(used.requests) == {"stream_get", "put"}
    compacted_files = {
        f.object_key for f in plan.files if any(c.topic_id == compacted.topic_id for c in f.chunks)
    }
    for f in plan.files:
        assert result.stats.gets_per_input_file[f.object_key] == (2 if f.object_key in compacted_files else 1)
    # moto's request log, independently: per input file only whole-object GETs from byte 0
    for f in plan.files:
        on_file = [r for r in recorded if r.path == f"/{moto_s3.name}/{f.object_key}"]
        assert [r.method for r in on_file] == ["GET"] * result.stats.gets_per_input_file[f.object_key]
        assert all("range" not in {k.lower() for k in r.headers} for r in on_file)
    assert sorted((c.partition, c.first_dirty_offset) for c in checkpoints) == sorted(
        (p, service.find_chunks([FetchQuery(compacted.topic_id, p, 0, 1)])[0].high_watermark) for p in (0, 1)
    )

    # the outputs keep a lower bound of their records' timestamps: the smallest min of the
    # inputs their surviving batches came from (all of them where nothing was dropped)
    for topic_id, _, partition, compact in parts:
        (info,) = service.find_chunks([FetchQuery(topic_id, partition, 0, 1 << 40)])
        assert info.chunks and all(c.offsets_absolute for c in info.chunks)
        mins = input_mins[(topic_id, partition)]
        assert all(c.min_timestamp in mins for c in info.chunks)
        if not compact:
            assert min(c.min_timestamp for c in info.chunks if c.min_timestamp is not None) == min(mins)

    for partition in (0, 1):
        hw = service.find_chunks([FetchQuery(compacted.topic_id, partition, 0, 1)])[0].high_watermark
        got = await _consume(bootstrap, "table", partition, hw)
        want = sorted((off, key, value) for (p, key), (off, value) in latest.items() if p == partition)
        assert got == want  # each key once: its latest value (or tombstone) at its original offset
    got_events = await _consume(bootstrap, "events", 0, len(events))
    assert [(o, v) for o, _k, v in got_events] == sorted(events)
