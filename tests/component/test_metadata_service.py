"""The metadata service's behaviour, through the `MetadataClient` interface.

Every test runs on SQLite and on a real PostgreSQL (a fresh database each), and both
in-process (`LocalMetadataClient`) and over HTTP (`HttpMetadataClient` on the FastAPI app
through httpx's ASGI transport). HTTP-only concerns (malformed input, a real TCP server)
are in test_metadata_http.py; concurrency and failure injection in
test_metadata_concurrency.py.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from pyroaring import BitMap
from skiff.metadata import bitmaps
from skiff.metadata.errors import ConflictError, MetadataError
from skiff.metadata.inspection import count_rows, file_states
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AgentInfo,
    BatchSpec,
    ChunkSpec,
    FetchQuery,
    FileSpec,
    GroupOffset,
    OffsetQuery,
    OutputChunk,
    PartitionKey,
)

from tests.support.metadata_fixtures import T0_MS as T0
from tests.support.metadata_fixtures import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# ------------------------------------------------------------------ building files


@dataclass(frozen=True)
class B:
    """A batch to lay out in a test file."""

    n: int = 1  # offsets (and records)
    pid: int = -1
    epoch: int = 0
    seq: int = 0
    size: int = 70  # a RecordBatch is at least 61 bytes
    ts: int = 1000
    min_ts: int | None = None  # the batch's smallest record timestamp; None: unknown


def layout(
    parts: Sequence[tuple[uuid.UUID, int, Sequence[B]]], key: str | None = None
) -> tuple[FileSpec, list[ChunkSpec]]:
    """A file holding the given chunks, batches laid out back to back."""
    pos = 0
    specs = []
    for tid, part, bs in parts:
        batches = []
        for b in bs:
            batches.append(
                BatchSpec(
                    byte_offset=pos,
                    byte_length=b.size,
                    offset_count=b.n,
                    record_count=b.n,
                    max_timestamp=b.ts,
                    min_timestamp=b.min_ts,
                    producer_id=b.pid,
                    producer_epoch=b.epoch if b.pid >= 0 else -1,
                    base_sequence=b.seq if b.pid >= 0 else -1,
                )
            )
            pos += b.size
        specs.append(ChunkSpec(tid, part, tuple(batches)))
    return FileSpec(key or f"files/{uuid.uuid4().hex}", pos + 100, 0, "test"), specs


async def commit(
    md: LocalMetadataClient, parts: Sequence[tuple[uuid.UUID, int, Sequence[B]]]
) -> list[list[int]]:
    """Commit and return base offsets per chunk (asserting every batch succeeded)."""
    f, specs = layout(parts)
    results = await md.commit_file(f, specs)
    out = []
    for r in results:
        assert r.error_code == 0, r
        assert all(b.error_code == 0 for b in r.batches), r
        out.append([b.base_offset for b in r.batches])
    return out


async def hwm(md: LocalMetadataClient, tid: uuid.UUID, part: int) -> int:
    (s,) = await md.partition_states([PartitionKey(tid, part)])
    assert s.error_code == 0
    return s.high_watermark


# ------------------------------------------------------------------ topics


async def test_create_describe_list_topics(md: LocalMetadataClient) -> None:
    t = await md.create_topic("orders", 3, {"cleanup.policy": "compact", "retention.ms": " 1000 "})
    assert t.name == "orders" and t.partition_count == 3
    assert t.configs == {"cleanup.policy": "compact", "retention.ms": "1000"}  # normalized
    other = await md.create_topic("a.b-c_D9", 1, {})
    assert other.topic_id != t.topic_id
    assert [x.name for x in await md.list_topics()] == ["a.b-c_D9", "orders"]
    assert await md.describe_topics(["orders", "missing"]) == {"orders": t}
    assert await md.topics_by_id([t.topic_id, uuid.uuid4()]) == {t.topic_id: t}
    states = await md.partition_states([PartitionKey(t.topic_id, p) for p in range(4)])
    assert [(s.error_code, s.log_start_offset, s.high_watermark) for s in states] == [(0, 0, 0)] * 3 + [
        (3, -1, -1)
    ]


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad/name", "sp ace", "ü", "a\x00"])
async def test_create_topic_invalid_name(md: LocalMetadataClient, name: str) -> None:
    with pytest.raises(MetadataError) as e:
        await md.create_topic(name, 1, {})
    assert e.value.error_code == 17


async def test_create_topic_errors(md: LocalMetadataClient) -> None:
    await md.create_topic("t", 1, {})
    assert (await md.create_topic("a" * 249, 1, {})).name == "a" * 249
    cases: list[tuple[str, int, dict[str, str], int]] = [
        ("t", 1, {}, 36),
        ("u", 0, {}, 37),
        ("u", -1, {}, 37),
        ("u", 1, {"no.such.config": "1"}, 40),
        ("u", 1, {"retention.ms": "abc"}, 40),
        ("u", 1, {"retention.ms": "-2"}, 40),
        ("u", 1, {"cleanup.policy": "nope"}, 40),
        ("u", 1, {"message.timestamp.type": "Whenever"}, 40),
        ("u", 1, {"max.message.bytes": str(2**31)}, 40),
        ("u", 1, {"min.insync.replicas": "0"}, 40),
    ]
    for name, n, cfg, code in cases:
        with pytest.raises(MetadataError) as e:
            await md.create_topic(name, n, cfg)
        assert e.value.error_code == code, (name, n, cfg)
    t = await md.create_topic("u", 2, {"min.insync.replicas": "2", "cleanup.policy": "compact, delete"})
    assert t.configs == {"min.insync.replicas": "2", "cleanup.policy": "compact,delete"}
    assert [x.name for x in await md.list_topics()] == ["a" * 249, "t", "u"]


async def test_alter_topic_configs(md: LocalMetadataClient) -> None:
    await md.create_topic("t", 1, {"retention.ms": "1000", "cleanup.policy": "compact"})
    t = await md.alter_topic_configs("t", {"retention.bytes": "5"}, ["cleanup.policy"], False)
    assert t.configs == {"retention.ms": "1000", "retention.bytes": "5"}
    t = await md.alter_topic_configs("t", {"max.message.bytes": "100"}, [], True)
    assert t.configs == {"max.message.bytes": "100"}
    assert (await md.describe_topics(["t"]))["t"].configs == {"max.message.bytes": "100"}
    for args, code in [
        (("t", {"bogus": "1"}, [], False), 40),
        (("t", {}, ["bogus"], False), 40),
        (("t", {"retention.ms": "x"}, [], True), 40),
        (("nope", {}, [], False), 3),
    ]:
        with pytest.raises(MetadataError) as e:
            await md.alter_topic_configs(*args)  # type: ignore[arg-type]
        assert e.value.error_code == code
    assert (await md.describe_topics(["t"]))["t"].configs == {"max.message.bytes": "100"}


async def test_add_partitions(md: LocalMetadataClient) -> None:
    t = await md.create_topic("t", 2, {})
    for n in (2, 1):
        with pytest.raises(MetadataError) as e:
            await md.add_partitions("t", n)
        assert e.value.error_code == 37
    with pytest.raises(MetadataError) as e:
        await md.add_partitions("nope", 5)
    assert e.value.error_code == 3
    t2 = await md.add_partitions("t", 5)
    assert t2.partition_count == 5 and t2.topic_id == t.topic_id
    assert await commit(md, [(t.topic_id, 4, [B(3)])]) == [[0]]
    assert await hwm(md, t.topic_id, 4) == 3


async def test_delete_topic(md: LocalMetadataClient, metadata_service: MetadataService) -> None:
    t = await md.create_topic("t", 2, {})
    keep = await md.create_topic("keep", 1, {})
    f, specs = layout([(t.topic_id, 0, [B(2)]), (keep.topic_id, 0, [B(1)])])
    await md.commit_file(f, specs)
    f2, specs2 = layout([(t.topic_id, 1, [B(2)])])
    await md.commit_file(f2, specs2)
    await md.commit_offsets("g", [GroupOffset("t", 0, 1), GroupOffset("keep", 0, 1)])
    await md.delete_topic("t")
    with pytest.raises(MetadataError) as e:
        await md.delete_topic("t")
    assert e.value.error_code == 3
    assert await md.describe_topics(["t"]) == {}
    assert [o.topic for o in await md.fetch_offsets("g", None)] == ["keep"]
    # f2 only held the deleted topic: it is marked for GC; f still holds "keep".
    assert file_states(metadata_service.engine, [f.object_key, f2.object_key]) == {
        f.object_key: "live",
        f2.object_key: "deleting",
    }
    results = await md.commit_file(*layout([(t.topic_id, 0, [B(1)])]))
    assert results[0].error_code == 3
    infos = await md.find_chunks([FetchQuery(t.topic_id, 0, 0, 100)])
    assert infos[0].error_code == 3
    again = await md.create_topic("t", 1, {})
    assert again.topic_id != t.topic_id
    assert await hwm(md, again.topic_id, 0) == 0


# ------------------------------------------------------------------ commit


async def test_commit_assigns_contiguous_offsets(md: LocalMetadataClient) -> None:
    t = await md.create_topic("t", 2, {})
    tid = t.topic_id
    assert await commit(md, [(tid, 0, [B(5), B(3)]), (tid, 1, [B(1)])]) == [[0, 5], [0]]
    assert await commit(md, [(tid, 0, [B(2)]), (tid, 1, [B(4), B(1)])]) == [[8], [1, 5]]
    assert await hwm(md, tid, 0) == 10 and await hwm(md, tid, 1) == 6
    # The same partition twice in one file: the second chunk continues the first.
    assert await commit(md, [(tid, 0, [B(1)]), (tid, 1, [B(1)]), (tid, 0, [B(2)])]) == [[10], [6], [11]]
    (info,) = await md.find_chunks([FetchQuery(tid, 0, 0, 10**9)])
    assert [(c.base_offset, c.last_offset, c.record_count) for c in info.chunks] == [
        (0, 7, 8),
        (8, 9, 2),
        (10, 10, 1),
        (11, 12, 2),
    ]
    assert all(not c.offsets_absolute and c.present_offsets is None for c in info.chunks)
    results = await md.commit_file(*layout([(tid, 0, [B(1)])]))
    assert results[0].batches[0].log_start_offset == 0
    assert results[0].batches[0].log_append_time_ms == -1


async def test_unknown_partition_fails_only_its_chunk(md: LocalMetadataClient) -> None:
    t = await md.create_topic("t", 1, {})
    f, specs = layout([(t.topic_id, 0, [B(2)]), (t.topic_id, 7, [B(1), B(1)]), (uuid.uuid4(), 0, [B(1)])])
    results = await md.commit_file(f, specs)
    assert [r.error_code for r in results] == [0, 3, 3]
    assert [b.error_code for b in results[1].batches] == [3, 3]
    assert results[0].batches[0].base_offset == 0
    assert await hwm(md, t.topic_id, 0) == 2


async def test_file_with_no_accepted_batch_is_recorded_deleting(
    md: LocalMetadataClient, metadata_service: MetadataService
) -> None:
    f, specs = layout([(uuid.uuid4(), 0, [B(1)])])
    results = await md.commit_file(f, specs)
    assert results[0].error_code == 3
    assert file_states(metadata_service.engine, [f.object_key]) == {f.object_key: "deleting"}


async def test_log_append_time(md: LocalMetadataClient, clock: FakeClock) -> None:
    lat = await md.create_topic("lat", 1, {"message.timestamp.type": "LogAppendTime"})
    ct = await md.create_topic("ct", 1, {})
    clock.now = T0 + 12345
    f, specs = layout([(lat.topic_id, 0, [B(1, ts=5)]), (ct.topic_id, 0, [B(1, ts=5)])])
    r = await md.commit_file(f, specs)
    assert r[0].batches[0].log_append_time_ms == T0 + 12345
    assert r[1].batches[0].log_append_time_ms == -1
    (a,) = await md.find_chunks([FetchQuery(lat.topic_id, 0, 0, 1)])
    assert a.chunks[0].max_timestamp == T0 + 12345  # the broker's time replaces the producer's
    (b,) = await md.find_chunks([FetchQuery(ct.topic_id, 0, 0, 1)])
    assert b.chunks[0].max_timestamp == 5


async def test_max_message_bytes(md: LocalMetadataClient) -> None:
    t = await md.create_topic("t", 1, {"max.message.bytes": "100"})
    f, specs = layout([(t.topic_id, 0, [B(1, size=70), B(1, size=101), B(2, size=100)])])
    r = await md.commit_file(f, specs)
    assert [(b.error_code, b.base_offset) for b in r[0].batches] == [(0, 0), (10, -1), (0, 1)]
    (info,) = await md.find_chunks([FetchQuery(t.topic_id, 0, 0, 10**6)])
    # The refused batch splits the run: its bytes stay in the file, no chunk points at them.
    assert [(c.byte_position, c.byte_length, c.base_offset, c.last_offset) for c in info.chunks] == [
        (0, 70, 0, 0),
        (171, 100, 1, 2),
    ]


async def test_commit_answer_carries_the_locations_find_chunks_returns(
    md: LocalMetadataClient, clock: FakeClock
) -> None:
    """The answer's locations are the chunk rows as find_chunks reads them back: ids,
    byte ranges, offsets, counts, and the LogAppendTime max_timestamp (the broker's clock,
    not the producers' timestamps), for every run a refused or duplicate batch splits."""
    lat = await md.create_topic(
        "lat", 1, {"message.timestamp.type": "LogAppendTime", "max.message.bytes": "100"}
    )
    ct = await md.create_topic("ct", 2, {"max.message.bytes": "100"})
    await commit(md, [(ct.topic_id, 1, [B(1, pid=7, seq=0)])])  # cached: a retry of it is a duplicate
    clock.now = T0 + 777
    f, specs = layout(
        [
            (lat.topic_id, 0, [B(2, ts=5), B(1, size=101), B(3, ts=9), B(1, ts=4)]),
            (ct.topic_id, 0, [B(1, ts=50), B(2, ts=70)]),
            (ct.topic_id, 1, [B(1, pid=7, seq=0), B(1, pid=7, seq=1, ts=3)]),
            (uuid.uuid4(), 0, [B(1)]),
        ]
    )
    results = await md.commit_file(f, specs)
    assert [len(r.locations) for r in results] == [2, 1, 1, 0]
    for (tid, part), r in zip(
        [(lat.topic_id, 0), (ct.topic_id, 0), (ct.topic_id, 1), (specs[3].topic_id, 0)], results, strict=True
    ):
        if not r.locations:
            continue
        (info,) = await md.find_chunks([FetchQuery(tid, part, r.locations[0].base_offset, 10**6)])
        assert info.chunks == r.locations
        assert all(c.chunk_id > 0 and c.object_key == f.object_key for c in r.locations)
    assert [c.max_timestamp for c in results[0].locations] == [T0 + 777, T0 + 777]
    assert [(c.base_offset, c.last_offset, c.record_count) for c in results[0].locations] == [
        (0, 1, 2),
        (2, 5, 4),
    ]
    assert results[1].locations[0].max_timestamp == 70
    assert (results[2].locations[0].base_offset, results[2].locations[0].max_timestamp) == (1, 3)
    # a re-commit of the same object (its first answer lost) carries them again
    again = await md.commit_file(f, specs)
    assert [r.locations for r in again] == [r.locations for r in results]


async def test_chunk_min_timestamp_is_the_smallest_of_its_batches_or_unknown(md: LocalMetadataClient) -> None:
    """A chunk row's min_timestamp (Spark's upper time bound prunes with it) is its batches'
    smallest; one batch without a min (an older agent) makes it unknown, never a guess."""
    t = await md.create_topic("mins", 3, {})
    f, specs = layout(
        [
            (t.topic_id, 0, [B(2, ts=50, min_ts=40), B(1, ts=30, min_ts=-20), B(3, ts=90, min_ts=60)]),
            (t.topic_id, 1, [B(1, ts=50, min_ts=40), B(1, ts=60)]),
            (t.topic_id, 2, [B(1, ts=50)]),
        ]
    )
    results = await md.commit_file(f, specs)
    assert [[c.min_timestamp for c in r.locations] for r in results] == [[-20], [None], [None]]
    for part, r in enumerate(results):
        (info,) = await md.find_chunks([FetchQuery(t.topic_id, part, 0, 10**6)])
        assert info.chunks == r.locations  # the row holds it, on both databases
    # a min above the batch's max would hide its records from a time-bounded scan: refused
    f, specs = layout([(t.topic_id, 0, [B(1, ts=50, min_ts=51)])])
    with pytest.raises(MetadataError, match="min_timestamp 51 above its max_timestamp"):
        await md.commit_file(f, specs)


async def test_recommit_of_same_object_answers_the_same(
    md: LocalMetadataClient, metadata_service: MetadataService
) -> None:
    t = await md.create_topic("t", 2, {})
    tid = t.topic_id
    await commit(md, [(tid, 0, [B(3)])])
    f, specs = layout([(tid, 0, [B(2), B(1, pid=9, seq=0), B(1, pid=9, seq=0)]), (tid, 1, [B(4)])])
    first = await md.commit_file(f, specs)
    before = count_rows(metadata_service.engine)
    second = await md.commit_file(f, specs)
    assert second == first
    assert count_rows(metadata_service.engine) == before
    assert await hwm(md, tid, 0) == 6


# ------------------------------------------------------------------ idempotent producers


async def test_init_producer_id(md: LocalMetadataClient) -> None:
    ids = [await md.init_producer_id() for _ in range(5)]
    assert [e for _, e in ids] == [0] * 5
    pids = [p for p, _ in ids]
    assert pids == sorted(pids) and len(set(pids)) == 5 and pids[0] >= 0


async def test_duplicate_batch_returns_original_offset(
    md: LocalMetadataClient, metadata_service: MetadataService
) -> None:
    t = await md.create_topic("t", 1, {})
    tid = t.topic_id
    pid, epoch = await md.init_producer_id()
    assert await commit(md, [(tid, 0, [B(1), B(3, pid=pid, epoch=epoch, seq=0)])]) == [[0, 1]]
    assert await commit(md, [(tid, 0, [B(2, pid=pid, epoch=epoch, seq=3)])]) == [[4]]
    chunks_before = count_rows(metadata_service.engine)["chunks"]
    # A retry of the first batch (its response was lost) lands in a later file.
    assert await commit(md, [(tid, 0, [B(3, pid=pid, epoch=epoch, seq=0)])]) == [[1]]
    assert await hwm(md, tid, 0) == 6
    assert count_rows(metadata_service.engine)["chunks"] == chunks_before
    # A retried duplicate in the middle of a run splits the run.
    f, specs = layout([(tid, 0, [B(1), B(2, pid=pid, epoch=epoch, seq=3), B(1)])])
    r = await md.commit_file(f, specs)
    assert [b.base_offset for b in r[0].batches] == [6, 4, 7]
    (info,) = await md.find_chunks([FetchQuery(tid, 0, 6, 10**6)])
    assert [(c.byte_position, c.base_offset, c.last_offset) for c in info.chunks] == [(0, 6, 6), (140, 7, 7)]


async def test_duplicate_within_the_same_commit(md: LocalMetadataClient) -> None:
    t = await md.create_topic("t", 1, {})
    tid = t.topic_id
    pid, _ = await md.init_producer_id()
    f, specs = layout(
        [(tid, 0, [B(2, pid=pid, seq=0), B(2, pid=pid, seq=0), B(1, pid=pid, seq=2), B(2, pid=pid, seq=0)])]
    )
    r = await md.commit_file(f, specs)
    assert [(b.error_code, b.base_offset) for b in r[0].batches] == [(0, 0), (0, 0), (0, 2), (0, 0)]
    assert await hwm(md, tid, 0) == 3


async def test_out_of_order_sequence(md: LocalMetadataClient) -> None:
    t = await md.create_topic("t", 1, {})
    tid = t.topic_id
    pid, _ = await md.init_producer_id()
    await commit(md, [(tid, 0, [B(2, pid=pid, seq=0)])])
    f, specs = layout(
        [(tid, 0, [B(1, pid=pid, seq=5), B(1, pid=pid, seq=1), B(1, pid=pid, seq=2), B(1, pid=pid, seq=3)])]
    )
    r = await md.commit_file(f, specs)
    # seq 5: a gap; seq 1: overlaps 0..1 without being a cached batch; 2 and 3 continue.
    assert [(b.error_code, b.base_offset) for b in r[0].batches] == [(45, -1), (45, -1), (0, 2), (0, 3)]
    assert r[0].batches[0].error_message
    assert await hwm(md, tid, 0) == 4


async def test_producer_epochs(md: LocalMetadataClient) -> None:
    t = await md.create_topic("t", 1, {})
    tid = t.topic_id
    pid = 4242
    await commit(md, [(tid, 0, [B(1, pid=pid, epoch=3, seq=0)])])

    async def one(epoch: int, seq: int) -> tuple[int, int]:
        f, specs = layout([(tid, 0, [B(1, pid=pid, epoch=epoch, seq=seq)])])
        (r,) = await md.commit_file(f, specs)
        return r.batches[0].error_code, r.batches[0].base_offset

    assert await one(2, 1) == (47, -1)  # fenced: an older epoch
    assert await one(2, 0) == (47, -1)
    assert await one(4, 5) == (45, -1)  # a new epoch must start at sequence 0
    assert await one(4, 0) == (0, 1)  # bumped
    assert await one(3, 1) == (47, -1)  # the old epoch is now fenced
    assert await one(4, 0) == (0, 1)  # duplicate in the new epoch
    assert await one(4, 1) == (0, 2)
    assert await hwm(md, tid, 0) == 3


async def test_unknown_producer_any_sequence_accepted(md: LocalMetadataClient) -> None:
    """Kafka >= 2.5 (KIP-360): without state for the producer (expired, or the partition
    is new to it) any sequence is accepted, then sequences must follow on."""
    t = await md.create_topic("t", 1, {})
    tid = t.topic_id
    assert await commit(md, [(tid, 0, [B(2, pid=77, epoch=1, seq=40)])]) == [[0]]
    assert await commit(md, [(tid, 0, [B(1, pid=77, epoch=1, seq=42)])]) == [[2]]
    f, specs = layout([(tid, 0, [B(1, pid=77, epoch=1, seq=44)])])
    assert (await md.commit_file(f, specs))[0].batches[0].error_code == 45


async def test_sequence_wraps_at_int32(md: LocalMetadataClient) -> None:
    t = await md.create_topic("t", 1, {})
    tid = t.topic_id
    top = 2**31 - 1
    assert await commit(md, [(tid, 0, [B(2, pid=5, seq=top - 1)])]) == [[0]]  # sequences top-1, top
    assert await commit(md, [(tid, 0, [B(3, pid=5, seq=0)])]) == [[2]]  # wraps to 0
    assert await commit(md, [(tid, 0, [B(2, pid=5, seq=top - 1)])]) == [[0]]  # a duplicate, still cached
    # A batch whose sequences wrap inside it: top-1, top, 0; the next one starts at 1.
    assert await commit(md, [(tid, 0, [B(3, pid=6, seq=top - 1)])]) == [[5]]
    assert await commit(md, [(tid, 0, [B(1, pid=6, seq=1)])]) == [[8]]
    assert await commit(md, [(tid, 0, [B(3, pid=6, seq=top - 1)])]) == [[5]]
    assert await hwm(md, tid, 0) == 9


async def test_only_last_five_batches_are_cached(md: LocalMetadataClient) -> None:
    t = await md.create_topic("t", 1, {})
    tid = t.topic_id
    for i in range(6):
        await commit(md, [(tid, 0, [B(1, pid=8, seq=i)])])
    assert await commit(md, [(tid, 0, [B(1, pid=8, seq=1)])]) == [[1]]  # still cached
    f, specs = layout([(tid, 0, [B(1, pid=8, seq=0)])])  # evicted: no longer recognized
    assert (await md.commit_file(f, specs))[0].batches[0].error_code == 45
    assert await hwm(md, tid, 0) == 6


async def test_producer_state_is_per_partition(md: LocalMetadataClient) -> None:
    t = await md.create_topic("t", 2, {})
    tid = t.topic_id
    assert await commit(md, [(tid, 0, [B(1, pid=3, seq=0)]), (tid, 1, [B(1, pid=3, seq=0)])]) == [[0], [0]]
    assert await commit(md, [(tid, 1, [B(1, pid=3, seq=1)]), (tid, 0, [B(1, pid=3, seq=0)])]) == [[1], [0]]


# ------------------------------------------------------------------ fetch


async def test_find_chunks(md: LocalMetadataClient) -> None:
    t = await md.create_topic("t", 1, {})
    tid = t.topic_id
    for _ in range(30):  # 30 chunks of 3 offsets and 100 bytes each
        await commit(md, [(tid, 0, [B(3, size=100)])])
    q = [
        FetchQuery(tid, 0, 0, 1),  # at least one chunk, however small max_bytes
        FetchQuery(tid, 0, 4, 250),  # inside a chunk; 3 chunks reach 250 bytes
        FetchQuery(tid, 0, 89, 10**6),  # the last offset
        FetchQuery(tid, 0, 0, 10**9),  # everything
        FetchQuery(tid, 0, 90, 100),  # at the high watermark: nothing, no error
        FetchQuery(tid, 0, 91, 100),
        FetchQuery(tid, 0, -1, 100),
        FetchQuery(tid, 1, 0, 100),
    ]
    r = await md.find_chunks(q)
    assert [(x.error_code, x.log_start_offset, x.high_watermark) for x in r[:6]] == [(0, 0, 90)] * 5 + [
        (1, 0, 90)
    ]
    assert [c.base_offset for c in r[0].chunks] == [0]
    assert [c.base_offset for c in r[1].chunks] == [3, 6, 9]
    assert [c.base_offset for c in r[2].chunks] == [87]
    assert [c.base_offset for c in r[3].chunks] == list(range(0, 90, 3))
    assert r[4].chunks == () and r[5].chunks == ()
    assert r[6].error_code == 1
    assert r[7].error_code == 3
    c = r[0].chunks[0]
    assert (c.byte_position, c.byte_length, c.last_offset, c.record_count, c.max_timestamp) == (
        0,
        100,
        2,
        3,
        1000,
    )
    assert c.object_key.startswith("files/")


async def test_list_offsets(md: LocalMetadataClient) -> None:
    t = await md.create_topic("t", 2, {})
    tid = t.topic_id
    await commit(md, [(tid, 0, [B(2, ts=100)])])
    await commit(md, [(tid, 0, [B(3, ts=500)])])
    await commit(md, [(tid, 0, [B(1, ts=300)])])
    r = await md.list_offsets(
        [
            OffsetQuery(tid, 0, EARLIEST_TIMESTAMP),
            OffsetQuery(tid, 0, LATEST_TIMESTAMP),
            OffsetQuery(tid, 0, MAX_TIMESTAMP),
            OffsetQuery(tid, 0, 0),
            OffsetQuery(tid, 0, 150),
            OffsetQuery(tid, 0, 500),
            OffsetQuery(tid, 0, 501),
            OffsetQuery(tid, 1, 0),
            OffsetQuery(tid, 1, MAX_TIMESTAMP),
            OffsetQuery(tid, 9, LATEST_TIMESTAMP),
        ]
    )
    assert [(a.error_code, a.offset, a.timestamp) for a in r] == [
        (0, 0, -1),
        (0, 6, -1),
        (0, 4, 500),  # last offset of the chunk with the greatest timestamp
        (0, 0, 100),
        (0, 2, 500),  # first chunk whose max timestamp >= 150: starts at 2
        (0, 2, 500),
        (0, -1, -1),
        (0, -1, -1),
        (0, -1, -1),
        (3, -1, -1),
    ]


# ------------------------------------------------------------------ compaction


async def test_replace_chunks(md: LocalMetadataClient, metadata_service: MetadataService) -> None:
    t = await md.create_topic("t", 2, {"cleanup.policy": "compact"})
    tid = t.topic_id
    f1, s1 = layout([(tid, 0, [B(4, ts=10)]), (tid, 1, [B(2)])])
    await md.commit_file(f1, s1)
    f2, s2 = layout([(tid, 0, [B(4, ts=20)])])
    await md.commit_file(f2, s2)
    await commit(md, [(tid, 0, [B(2, ts=30)])])  # offsets 8..9, not compacted
    (info,) = await md.find_chunks([FetchQuery(tid, 0, 0, 10**9)])
    inputs = [c.chunk_id for c in info.chunks[:2]]  # offsets 0..7
    present = [1, 3, 6, 7]
    out = OutputChunk(
        tid,
        0,
        byte_position=0,
        byte_length=140,
        base_offset=0,
        last_offset=7,
        record_count=4,
        batch_count=2,
        max_timestamp=20,
        present_offsets=bitmaps.from_absolute(0, present),
        min_timestamp=3,
    )
    new = FileSpec("compacted/1", 200, 1, "compactor")
    await md.replace_chunks(inputs, new, [out])
    # f2 lost its only chunk: deleting. f1 still holds partition 1.
    assert file_states(metadata_service.engine, [f1.object_key, f2.object_key, new.object_key]) == {
        f1.object_key: "live",
        f2.object_key: "deleting",
        new.object_key: "live",
    }
    assert await hwm(md, tid, 0) == 10  # offsets never change
    r = await md.find_chunks(
        [
            FetchQuery(tid, 0, 0, 1),
            FetchQuery(tid, 0, 2, 1),
            FetchQuery(tid, 0, 8, 1),
            FetchQuery(tid, 0, 7, 10**6),
        ]
    )
    c = r[0].chunks[0]
    assert (c.object_key, c.base_offset, c.last_offset, c.record_count, c.offsets_absolute) == (
        "compacted/1",
        0,
        7,
        4,
        True,
    )
    assert c.present_offsets is not None and list(BitMap.deserialize(c.present_offsets)) == present
    assert (c.min_timestamp, c.max_timestamp) == (3, 20)  # the compactor's lower bound, kept
    assert bitmaps.next_present_in_chunk(c, 2) == 3 and bitmaps.count_in_chunk(c, 0, 8) == 4
    assert r[1].chunks[0].chunk_id == c.chunk_id
    assert [x.base_offset for x in r[2].chunks] == [8]
    assert [x.base_offset for x in r[3].chunks] == [0, 8]
    # Compare-and-set: the inputs are gone now.
    with pytest.raises(ConflictError) as e:
        await md.replace_chunks(inputs, FileSpec("compacted/2", 200, 1), [out])
    assert e.value.error_code == 22
    assert file_states(metadata_service.engine, ["compacted/2"]) == {}

    # Compacting the compacted chunk again so that nothing at or after offset 7 remains in
    # it: find_chunks skips it for offset 7 and goes on to the next chunk.
    out2 = OutputChunk(tid, 0, 0, 70, 0, 7, 2, 1, 20, bitmaps.from_absolute(0, [1, 3]))
    await md.replace_chunks([c.chunk_id], FileSpec("compacted/3", 100, 2), [out2])
    assert file_states(metadata_service.engine, ["compacted/1"]) == {"compacted/1": "deleting"}
    (r7,) = await md.find_chunks([FetchQuery(tid, 0, 7, 1)])
    assert [x.base_offset for x in r7.chunks] == [8]
    (r4,) = await md.find_chunks([FetchQuery(tid, 0, 4, 1)])
    assert [x.base_offset for x in r4.chunks] == [8]
    (r2,) = await md.find_chunks([FetchQuery(tid, 0, 2, 1)])
    assert [x.base_offset for x in r2.chunks] == [0]
    assert r2.chunks[0].min_timestamp is None  # an output without one: unknown
    lo = await md.list_offsets([OffsetQuery(tid, 0, MAX_TIMESTAMP), OffsetQuery(tid, 0, 15)])
    assert [(a.offset, a.timestamp) for a in lo] == [(9, 30), (1, 20)]


async def test_replace_chunks_refuses_bad_outputs(
    md: LocalMetadataClient, metadata_service: MetadataService
) -> None:
    t = await md.create_topic("t", 2, {})
    tid = t.topic_id
    for _ in range(3):
        await commit(md, [(tid, 0, [B(4)]), (tid, 1, [B(1)])])
    (info,) = await md.find_chunks([FetchQuery(tid, 0, 0, 10**9)])
    a, b, c = info.chunks  # 0..3, 4..7, 8..11

    def out(
        base: int, last: int, n: int | None = None, part: int = 0, bm: bytes | None = None, pos: int = 0
    ) -> OutputChunk:
        n = last - base + 1 if n is None else n
        return OutputChunk(tid, part, pos, 70, base, last, n, 1, 0, bm)

    bad: list[tuple[list[int], list[OutputChunk]]] = [
        ([a.chunk_id], [out(0, 4)]),  # past the inputs' range
        ([a.chunk_id, c.chunk_id], [out(0, 11, n=8)]),  # overlaps the remaining chunk b
        ([a.chunk_id, b.chunk_id], [out(0, 5), out(5, 7, pos=70)]),  # outputs overlap each other
        ([a.chunk_id], [out(0, 3, part=1)]),  # a partition without inputs
        ([a.chunk_id], [out(0, 3, n=5)]),  # more records than the inputs
        ([a.chunk_id], [out(0, 3, n=2, bm=bitmaps.serialize([0, 1, 2]))]),  # bitmap count != record_count
        ([a.chunk_id], [out(0, 3, n=1, bm=bitmaps.serialize([4]))]),  # bitmap past last_offset
        ([a.chunk_id], [out(0, 3, n=1, bm=b"garbage")]),
        ([], [out(0, 3)]),
        ([a.chunk_id], [dataclasses.replace(out(0, 3), min_timestamp=1)]),  # min above max (0)
    ]
    before = count_rows(metadata_service.engine)
    for ids, outs in bad:
        with pytest.raises(MetadataError) as e:
            await md.replace_chunks(ids, FileSpec(f"c/{uuid.uuid4()}", 200, 1), outs)
        assert e.value.error_code == 42 and not isinstance(e.value, ConflictError), (ids, outs)
    assert count_rows(metadata_service.engine) == before
    with pytest.raises(ConflictError):
        await md.replace_chunks([a.chunk_id, 10**9], FileSpec("c/x", 100, 1), [out(0, 3)])
    assert count_rows(metadata_service.engine) == before
    # Dropping everything (e.g. all tombstones expired) is allowed: the new file is empty.
    await md.replace_chunks([a.chunk_id, b.chunk_id], FileSpec("c/empty", 0, 1), [])
    assert file_states(metadata_service.engine, ["c/empty"]) == {"c/empty": "deleting"}
    (info2,) = await md.find_chunks([FetchQuery(tid, 0, 0, 10**9)])
    assert [x.base_offset for x in info2.chunks] == [8]


# ------------------------------------------------------------------ groups and agents


async def test_group_offsets(md: LocalMetadataClient) -> None:
    await md.create_topic("a", 1, {})
    await md.create_topic("b", 2, {})
    assert await md.fetch_offsets("g", None) == []
    await md.commit_offsets("g", [GroupOffset("a", 0, 5, "meta", 3), GroupOffset("b", 1, 7)])
    await md.commit_offsets("g", [GroupOffset("a", 0, 9, None, 4)])
    await md.commit_offsets("other", [GroupOffset("a", 0, 1)])
    await md.commit_offsets("", [GroupOffset("a", 0, 2)])  # the empty group id is legal in Kafka
    assert await md.fetch_offsets("g", None) == [
        GroupOffset("a", 0, 9, None, 4),
        GroupOffset("b", 1, 7, None, -1),
    ]
    assert await md.fetch_offsets("g", ["b", "zz"]) == [GroupOffset("b", 1, 7)]
    assert await md.fetch_offsets("g", []) == []
    assert await md.fetch_offsets("", None) == [GroupOffset("a", 0, 2)]
    assert await md.fetch_offsets("g/x y", None) == []


async def test_groups_with_offsets_and_partition_offset_delete(md: LocalMetadataClient) -> None:
    await md.create_topic("a", 2, {})
    await md.create_topic("b", 1, {})
    assert await md.groups_with_offsets(None) == []
    await md.commit_offsets("g", [GroupOffset("a", 0, 5), GroupOffset("a", 1, 6), GroupOffset("b", 0, 7)])
    await md.commit_offsets("other", [GroupOffset("a", 0, 1)])
    await md.commit_offsets("", [GroupOffset("a", 0, 2)])
    assert await md.groups_with_offsets(None) == ["", "g", "other"]
    assert await md.groups_with_offsets(["g", "nope", "g"]) == ["g"]
    assert await md.groups_with_offsets([]) == []
    # one transaction over the listed partitions only; partitions without a commit are ignored
    await md.delete_partition_offsets("g", [("a", 0), ("b", 0), ("a", 9), ("zz", 0), ("a", 0)])
    assert await md.fetch_offsets("g", None) == [GroupOffset("a", 1, 6)]
    assert await md.fetch_offsets("other", None) == [GroupOffset("a", 0, 1)]  # other groups untouched
    await md.delete_partition_offsets("g", [])
    await md.delete_partition_offsets("g", [("a", 1)])
    assert await md.groups_with_offsets(None) == ["", "other"]  # no offset left: no longer listed
    await md.delete_group_offsets("other")
    assert await md.groups_with_offsets(["other", ""]) == [""]


async def test_agents_heartbeat_and_ttl(md: LocalMetadataClient, clock: FakeClock) -> None:
    await md.heartbeat_agent(AgentInfo("a1", "h1", 9092, "z1"))
    clock.advance(4000)
    await md.heartbeat_agent(AgentInfo("a2", "h2", 9093))
    assert [(a.agent_id, a.host, a.zone, a.last_heartbeat_ms) for a in await md.live_agents()] == [
        ("a1", "h1", "z1", T0),
        ("a2", "h2", None, T0 + 4000),
    ]
    clock.advance(6001)  # a1 is 10001 ms old: past the 10 s TTL
    assert [a.agent_id for a in await md.live_agents()] == ["a2"]
    await md.heartbeat_agent(AgentInfo("a1", "h1b", 1234, "z2"))  # re-registers
    assert [(a.agent_id, a.host, a.port) for a in await md.live_agents()] == [
        ("a1", "h1b", 1234),
        ("a2", "h2", 9093),
    ]


async def test_agents_report_their_version_and_an_upgrade_replaces_it(md: LocalMetadataClient) -> None:
    await md.heartbeat_agent(AgentInfo("a1", "h1", 9092, version="0.1.0"))
    await md.heartbeat_agent(AgentInfo("old", "h2", 9093))  # an agent from before versions
    assert [(a.agent_id, a.version) for a in await md.live_agents()] == [("a1", "0.1.0"), ("old", "")]
    await md.heartbeat_agent(AgentInfo("a1", "h1", 9092, version="0.2.0"))  # restarted, upgraded
    await md.heartbeat_agent(AgentInfo("old", "h2", 9093, version="0.2.0"))
    assert [(a.agent_id, a.version) for a in await md.live_agents()] == [("a1", "0.2.0"), ("old", "0.2.0")]


# ------------------------------------------------------------------ schema


def test_migrations_match_schema_and_rerun(metadata_service: MetadataService) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    from skiff.metadata.db import current_revision, head_revision, upgrade_to_head
    from skiff.metadata.schema import metadata_obj

    upgrade_to_head(metadata_service.engine)  # again: a no-op
    assert current_revision(metadata_service.engine) == head_revision()
    with metadata_service.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata_obj)
    assert diff == []


# ------------------------------------------------------------------ what metadata refuses to store


@pytest.mark.parametrize(
    "key", ["../escape", "a/../b", "/abs", "a//b", "a/", ".hidden", "a\\b", "tab\there", "x" * 1025, ""]
)
async def test_object_keys_follow_the_store_rules(
    md: LocalMetadataClient, metadata_service: MetadataService, key: str
) -> None:
    """An object key the object store would refuse is refused by commit_file and
    replace_chunks (INVALID_REQUEST, naming the rule), and nothing is recorded."""
    t = await md.create_topic("t", 1, {})
    await commit(md, [(t.topic_id, 0, [B(2)])])
    (info,) = await md.find_chunks([FetchQuery(t.topic_id, 0, 0, 10**6)])
    before = count_rows(metadata_service.engine)
    f, specs = layout([(t.topic_id, 0, [B(1)])])
    with pytest.raises(MetadataError) as e:
        await md.commit_file(FileSpec(key, f.size_bytes, 0), specs)
    assert e.value.error_code == 42 and re.search("object.key", e.value.message), e.value.message
    out = OutputChunk(t.topic_id, 0, 0, 70, 0, 1, 2, 1, 1000)
    with pytest.raises(MetadataError) as e:
        await md.replace_chunks([info.chunks[0].chunk_id], FileSpec(key, 70, 1), [out])
    assert e.value.error_code == 42 and re.search("object.key", e.value.message), e.value.message
    assert count_rows(metadata_service.engine) == before


@pytest.mark.parametrize(
    ("size_bytes", "batch", "why"),
    [
        (10, BatchSpec(0, 10, 10**9, 10**9, 0), "61"),  # the case: a billion offsets in 10 bytes
        (100, BatchSpec(0, 60, 1, 1, 0), "61"),  # shorter than a RecordBatch header
        (100, BatchSpec(0, 100, 10**9, 10**9, 0), "cannot hold"),  # more records than 39 bytes can encode
        (100, BatchSpec(0, 100, 2**31, 2**31, 0), "cannot hold"),
        (100, BatchSpec(0, 100, 2, 3, 0), "cannot hold"),  # more records than offsets
        (100, BatchSpec(0, 100, 0, 0, 0), "cannot hold"),  # no offset at all
        (100, BatchSpec(150, 70, 1, 1, 0), "outside the file"),
    ],
)
async def test_commit_counts_must_fit_the_bytes(
    md: LocalMetadataClient, metadata_service: MetadataService, size_bytes: int, batch: BatchSpec, why: str
) -> None:
    """A commit whose counts the bytes cannot hold is refused whole (INVALID_REQUEST), so
    the partition keeps its high watermark and stays readable."""
    t = await md.create_topic("t", 1, {})
    await commit(md, [(t.topic_id, 0, [B(2)])])
    before = count_rows(metadata_service.engine)
    good = ChunkSpec(t.topic_id, 0, (BatchSpec(size_bytes, 70, 1, 1, 0),))  # refused with it: all or nothing
    with pytest.raises(MetadataError) as e:
        await md.commit_file(
            FileSpec(f"f/{uuid.uuid4().hex}", size_bytes + 70, 0), [ChunkSpec(t.topic_id, 0, (batch,)), good]
        )
    assert e.value.error_code == 42 and why in e.value.message, e.value.message
    assert count_rows(metadata_service.engine) == before and await hwm(md, t.topic_id, 0) == 2
    # the partition still takes commits
    f, specs = layout([(t.topic_id, 0, [B(1)])])
    assert [b.error_code for b in (await md.commit_file(f, specs))[0].batches] == [0]


async def test_batches_of_one_commit_may_not_overlap(md: LocalMetadataClient) -> None:
    t = await md.create_topic("t", 2, {})
    specs = [
        ChunkSpec(t.topic_id, 0, (BatchSpec(0, 70, 1, 1, 0),)),
        ChunkSpec(t.topic_id, 1, (BatchSpec(69, 70, 1, 1, 0),)),
    ]
    with pytest.raises(MetadataError) as e:
        await md.commit_file(FileSpec("f/overlap", 200, 0), specs)
    assert e.value.error_code == 42 and "claim the bytes at 69" in e.value.message
    assert await hwm(md, t.topic_id, 1) == 0


async def test_compacted_counts_must_fit_the_bytes(md: LocalMetadataClient) -> None:
    t = await md.create_topic("t", 1, {})
    await commit(md, [(t.topic_id, 0, [B(4)])])
    (info,) = await md.find_chunks([FetchQuery(t.topic_id, 0, 0, 10**6)])
    ids = [info.chunks[0].chunk_id]
    for out in (
        OutputChunk(t.topic_id, 0, 0, 100, 0, 3, 4, 2, 0),  # two batches need 122 bytes
        OutputChunk(t.topic_id, 0, 0, 10, 0, 3, 4, 1, 0),
        OutputChunk(t.topic_id, 0, 0, 61, 0, 3, 4, 1, 0),  # a header and no room for a record
        OutputChunk(t.topic_id, 0, 0, 100, 0, 3, 4, 0, 0),  # records in no batch
    ):
        with pytest.raises(MetadataError) as e:
            await md.replace_chunks(ids, FileSpec("c/1", 200, 1), [out])
        assert e.value.error_code == 42, out
    await md.replace_chunks(ids, FileSpec("c/1", 200, 1), [OutputChunk(t.topic_id, 0, 0, 100, 0, 3, 4, 1, 0)])


async def test_offset_commits_are_checked_per_partition(md: LocalMetadataClient) -> None:
    """Each offset gets its own answer with Kafka's code; the valid ones are stored, the
    others are not: a partition or topic that does not exist (UNKNOWN_TOPIC_OR_PARTITION),
    metadata over 4096 bytes (OFFSET_METADATA_TOO_LARGE). Negative offsets are stored as
    given, as Kafka stores them (KafkaJS commits -2 and reads it back)."""
    await md.create_topic("t", 2, {})
    results = await md.commit_offsets(
        "g",
        [
            GroupOffset("t", 0, 5),
            GroupOffset("t", 1, -5),
            GroupOffset("t", 2, 7),
            GroupOffset("nope", 0, 7),
            GroupOffset("t", -1, 7),
            GroupOffset("t", 1, -1),  # -1 is what clients commit to clear a position
            GroupOffset("t", 0, 6, "m" * 4097),
        ],
    )
    assert [r.error_code for r in results] == [0, 0, 3, 3, 3, 0, 12]
    assert "nope" in (results[3].error_message or "")
    assert await md.fetch_offsets("g", None) == [GroupOffset("t", 0, 5), GroupOffset("t", 1, -1)]
    await md.commit_offsets("g", [GroupOffset("t", 1, -2)])
    assert await md.fetch_offsets("g", None) == [GroupOffset("t", 0, 5), GroupOffset("t", 1, -2)]
    assert await md.commit_offsets("g", []) == []
