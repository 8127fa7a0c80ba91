"""Compaction planning in metadata: Kafka's cleaner rules over real chunk rows with an
injected clock, the cleaner checkpoint moving only with the swap, job leases (exclusive,
expiring, checked at the swap), and planners racing for work; on SQLite and PostgreSQL,
in-process and over HTTP."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Sequence

import pytest
from skiff.compactor.planner import PlannerConfig, claim_jobs, plan_jobs
from skiff.metadata.compaction.types import CheckpointUpdate, MergeRules
from skiff.metadata.errors import ConflictError, MetadataError
from skiff.metadata.inspection import file_states
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import BatchSpec, ChunkSpec, FetchQuery, FileSpec, OutputChunk, PartitionKey

from tests.support.metadata_fixtures import T0_MS as T0
from tests.support.metadata_fixtures import FakeClock

pytestmark = pytest.mark.anyio

LEASE_MS = 30_000


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def put(
    metadata_service: MetadataService,
    parts: Sequence[tuple[uuid.UUID, int, int, int, int]],
    key: str | None = None,
) -> FileSpec:
    """Commit one level-0 file; parts: (topic id, partition, records, bytes, max timestamp)."""
    specs, pos = [], 0
    for tid, p, n, nbytes, ts in parts:
        specs.append(ChunkSpec(tid, p, (BatchSpec(pos, nbytes, n, n, ts),)))
        pos += nbytes
    f = FileSpec(key or f"l0/{uuid.uuid4().hex}", pos + 100, 0, "agent")
    for r in metadata_service.commit_file(f, specs):
        assert r.error_code == 0, r
    return f


def live_chunks(metadata_service: MetadataService, tid: uuid.UUID, p: int) -> list:
    (info,) = metadata_service.find_chunks([FetchQuery(tid, p, 0, 10**12)])
    return list(info.chunks)


def output(tid: uuid.UUID, p: int, base: int, last: int, nbytes: int, ts: int) -> OutputChunk:
    n = last - base + 1
    return OutputChunk(tid, p, 0, nbytes, base, last, n, 1, ts)


def cands(metadata_service: MetadataService, **kw: object) -> dict[tuple[str, int], object]:
    return {(c.topic_name, c.partition): c for c in metadata_service.compaction_candidates(**kw)}  # type: ignore[arg-type]


# ------------------------------------------------------------------ Kafka's rules


def test_dirty_ratio_min_lag_and_max_lag(metadata_service: MetadataService, clock: FakeClock) -> None:
    t = metadata_service.create_topic("c", 1, {"cleanup.policy": "compact", "min.compaction.lag.ms": "30000"})
    tid = t.topic_id
    put(metadata_service, [(tid, 0, 10, 700, T0 - 60_000)])  # offsets 0..9, old enough
    put(metadata_service, [(tid, 0, 1, 70, T0 - 1_000)])  # offset 10, younger than the lag
    (c,) = metadata_service.compaction_candidates()
    assert (c.compact, c.first_dirty_offset, c.cleanable_end_offset) == (True, 0, 10)
    assert (c.clean_bytes, c.cleanable_bytes, c.dirty_ratio) == (0, 700, 1.0)
    assert [ch.location.base_offset for ch in c.chunks] == [0]  # min lag holds the young chunk back

    # A clean: the old chunk is replaced and the checkpoint moves to 10 in the same swap.
    lease = metadata_service.claim_compaction_job(
        [PartitionKey(tid, 0)], "test", LEASE_MS, [c.chunks[0].location.chunk_id]
    )
    assert lease is not None
    metadata_service.replace_chunks(
        [c.chunks[0].location.chunk_id],
        FileSpec("l1/a", 800, 1, "test"),
        [output(tid, 0, 0, 9, 700, T0 - 60_000)],
        [CheckpointUpdate(tid, 0, 10)],
        lease.token,
    )
    metadata_service.release_compaction_lease(lease.token)
    assert metadata_service.cleaner_checkpoints([PartitionKey(tid, 0)]) == {PartitionKey(tid, 0): 10}
    assert metadata_service.compaction_candidates() == []  # the dirty chunk is still too young
    clock.now += 30_000
    assert metadata_service.compaction_candidates() == []  # now cleanable, but ratio 70/770 <= 0.5

    # max.compaction.lag.ms forces a clean whatever the ratio, once dirty data is older.
    metadata_service.alter_topic_configs("c", {"max.compaction.lag.ms": "60000"}, [], False)
    assert metadata_service.compaction_candidates() == []  # dirty data is 31 s old
    clock.now += 30_000
    (c,) = metadata_service.compaction_candidates()
    assert c.forced and c.dirty_ratio < 0.5 and "max.compaction.lag.ms" in c.reason
    assert (c.first_dirty_offset, c.cleanable_end_offset, c.clean_bytes, c.cleanable_bytes) == (
        10,
        11,
        700,
        70,
    )
    # The job consumes the whole log up to the dirty end: the clean prefix too.
    assert [ch.location.base_offset for ch in c.chunks] == [0, 10]

    # The ratio alone: lower min.cleanable.dirty.ratio below 70/770.
    metadata_service.alter_topic_configs(
        "c", {"min.cleanable.dirty.ratio": "0.05"}, ["max.compaction.lag.ms"], False
    )
    (c,) = metadata_service.compaction_candidates()
    assert not c.forced and "dirty ratio" in c.reason


def test_delete_policy_partitions_merge_level0_chunks(
    metadata_service: MetadataService, clock: FakeClock
) -> None:
    t = metadata_service.create_topic("d", 2, {})
    c_t = metadata_service.create_topic("cc", 1, {"cleanup.policy": "compact"})
    tid = t.topic_id
    for _ in range(3):
        put(metadata_service, [(tid, 0, 5, 100, T0), (c_t.topic_id, 0, 1, 70, T0)])
    put(metadata_service, [(tid, 1, 5, 100, T0)])
    rules = MergeRules(
        target_chunk_bytes=10_000, min_level0_bytes=10**9, min_level0_chunks=3, max_level0_delay_ms=60_000
    )
    found = cands(metadata_service, rules=rules)
    merge = found[("d", 0)]
    assert not merge.compact and merge.delete  # type: ignore[attr-defined]
    assert [ch.location.base_offset for ch in merge.chunks] == [0, 5, 10]  # type: ignore[attr-defined]
    assert ("d", 1) not in found  # one young small chunk: not yet
    assert ("cc", 0) in found  # compacted: never cleaned, ratio 1.0
    clock.now += 60_000
    assert ("d", 1) in cands(metadata_service, rules=rules)  # old enough
    assert set(cands(metadata_service, topic="d", rules=rules)) == {("d", 0), ("d", 1)}


# ------------------------------------------------------------------ the checkpoint moves with the swap only


def test_refused_swaps_leave_the_checkpoint(metadata_service: MetadataService) -> None:
    t = metadata_service.create_topic("c", 1, {"cleanup.policy": "compact"})
    tid, key = t.topic_id, PartitionKey(t.topic_id, 0)
    put(metadata_service, [(tid, 0, 10, 700, T0)])
    put(metadata_service, [(tid, 0, 10, 700, T0)])
    a, b = live_chunks(metadata_service, tid, 0)
    lease = metadata_service.claim_compaction_job([key], "test", LEASE_MS)
    assert lease is not None

    with pytest.raises(ConflictError):  # an input chunk that does not exist: CAS fails
        metadata_service.replace_chunks(
            [a.chunk_id, 10**9],
            FileSpec("l1/x", 800, 1),
            [output(tid, 0, 0, 9, 700, T0)],
            [CheckpointUpdate(tid, 0, 10)],
            lease.token,
        )
    with pytest.raises(MetadataError):  # a checkpoint beyond the high watermark
        metadata_service.replace_chunks(
            [a.chunk_id],
            FileSpec("l1/y", 800, 1),
            [output(tid, 0, 0, 9, 700, T0)],
            [CheckpointUpdate(tid, 0, 21)],
            lease.token,
        )
    with pytest.raises(ConflictError):  # a lease token that is not the partition's
        metadata_service.replace_chunks(
            [a.chunk_id],
            FileSpec("l1/z", 800, 1),
            [output(tid, 0, 0, 9, 700, T0)],
            [CheckpointUpdate(tid, 0, 10)],
            "not-the-token",
        )
    assert metadata_service.cleaner_checkpoints([key]) == {key: None}
    assert [c.chunk_id for c in live_chunks(metadata_service, tid, 0)] == [a.chunk_id, b.chunk_id]
    assert file_states(metadata_service.engine, ["l1/x", "l1/y", "l1/z"]) == {}

    metadata_service.replace_chunks(
        [a.chunk_id, b.chunk_id],
        FileSpec("l1/ok", 1500, 1),
        [output(tid, 0, 0, 19, 1400, T0)],
        [CheckpointUpdate(tid, 0, 20)],
        lease.token,
    )
    assert metadata_service.cleaner_checkpoints([key]) == {key: 20}
    # Without checkpoint and lease (the original signature) a swap still works.
    (c,) = live_chunks(metadata_service, tid, 0)
    metadata_service.replace_chunks(
        [c.chunk_id], FileSpec("l1/plain", 1500, 1), [output(tid, 0, 0, 19, 1400, T0)]
    )
    assert metadata_service.cleaner_checkpoints([key]) == {key: 20}


# ------------------------------------------------------------------ leases


def test_leases_are_exclusive_and_expire(metadata_service: MetadataService, clock: FakeClock) -> None:
    t = metadata_service.create_topic("c", 3, {"cleanup.policy": "compact"})
    tid = t.topic_id
    k0, k1, k2 = (PartitionKey(tid, p) for p in range(3))
    put(metadata_service, [(tid, p, 1, 70, T0) for p in range(3)])
    a = metadata_service.claim_compaction_job([k0, k1], "a", LEASE_MS)
    assert a is not None and a.expires_ms == T0 + LEASE_MS
    assert metadata_service.claim_compaction_job([k1, k2], "b", LEASE_MS) is None  # all or none
    assert {c.partition for c in metadata_service.compaction_candidates()} == {2}  # leased ones not offered
    b = metadata_service.claim_compaction_job([k2], "b", LEASE_MS)
    assert b is not None

    clock.now += LEASE_MS - 1
    a = metadata_service.renew_compaction_lease(a.token, LEASE_MS)  # renewed in time
    clock.now += LEASE_MS  # a crashed: its lease expires; b's expired too
    assert {c.partition for c in metadata_service.compaction_candidates()} == {0, 1, 2}
    with pytest.raises(ConflictError):
        metadata_service.renew_compaction_lease(a.token, LEASE_MS)
    c = metadata_service.claim_compaction_job([k0, k1, k2], "c", LEASE_MS)
    assert c is not None
    (ch,) = live_chunks(metadata_service, tid, 0)
    with pytest.raises(ConflictError):  # a's swap after losing its lease is refused
        metadata_service.replace_chunks(
            [ch.chunk_id], FileSpec("l1/a", 100, 1), [output(tid, 0, 0, 0, 70, T0)], [], a.token
        )
    metadata_service.release_compaction_lease(a.token)  # releasing a lost lease changes nothing
    assert metadata_service.claim_compaction_job([k0], "d", LEASE_MS) is None
    metadata_service.release_compaction_lease(c.token)
    assert metadata_service.claim_compaction_job([k0], "d", LEASE_MS) is not None

    with pytest.raises(MetadataError):
        metadata_service.claim_compaction_job([PartitionKey(uuid.uuid4(), 0)], "x", LEASE_MS)
    with pytest.raises(MetadataError):
        metadata_service.claim_compaction_job([k1], "x", 0)


def test_claim_refuses_inputs_that_changed(metadata_service: MetadataService) -> None:
    t = metadata_service.create_topic("c", 1, {"cleanup.policy": "compact"})
    put(metadata_service, [(t.topic_id, 0, 1, 70, T0)])
    assert (
        metadata_service.claim_compaction_job([PartitionKey(t.topic_id, 0)], "a", LEASE_MS, [10**9]) is None
    )
    assert metadata_service.claim_compaction_job([PartitionKey(t.topic_id, 0)], "a", LEASE_MS) is not None


# ------------------------------------------------------------------ the planner over the client API


async def test_planner_claims_jobs_and_swaps_under_its_lease(
    md: LocalMetadataClient, metadata_service: MetadataService
) -> None:
    t = await md.create_topic("c", 2, {"cleanup.policy": "compact"})
    d = await md.create_topic("d", 1, {})
    tid = t.topic_id
    put(metadata_service, [(tid, 0, 2, 140, T0), (tid, 1, 2, 140, T0)], key="l0/shared")
    put(metadata_service, [(tid, 1, 2, 140, T0), (d.topic_id, 0, 3, 210, T0)], key="l0/second")
    put(metadata_service, [(tid, 0, 1, 70, T0)], key="l0/alone")
    rules = MergeRules(min_level0_chunks=1)
    config = PlannerConfig(holder="p1", rules=rules, clock_ms=lambda: 42)
    (dry,) = await plan_jobs(md, config=config)  # every partition shares a file with another
    assert dry.lease_token is None and len(dry.partitions) == 3
    assert [f.object_key for f in dry.files] == ["l0/alone", "l0/second", "l0/shared"]

    (job,) = await claim_jobs(md, config=config, max_jobs=5)
    assert job.lease_token and job.now_ms == 42
    assert await plan_jobs(md, config=config) == []  # all leased
    assert await claim_jobs(md, config=config) == []

    w = next(p for p in job.partitions if p.topic_id == tid and p.partition == 0)
    ids = [c.location.chunk_id for f in job.files for c in f.chunks if (c.topic_id, c.partition) == (tid, 0)]
    assert (w.first_dirty_offset, w.cleanable_end_offset, len(ids)) == (0, 3, 2)
    await md.replace_chunks(
        ids,
        FileSpec("l1/c0", 300, 1, "p1"),
        [output(tid, 0, 0, 2, 210, T0)],
        [CheckpointUpdate(tid, 0, 3)],
        job.lease_token,
    )
    await md.release_compaction_lease(job.lease_token)
    left = {(c.topic_name, c.partition) for c in await md.compaction_candidates(rules=rules)}
    assert left == {("c", 1), ("d", 0)}  # c-0 is clean now


async def test_two_planners_never_share_work(db_url: str, clock: FakeClock) -> None:
    """Two metadata services over one database (two compactor processes' views), each
    planner claiming everything it can at once: every partition is claimed once."""
    first = MetadataService.from_url(db_url, clock=clock)
    second = MetadataService.from_url(db_url, clock=clock, migrate=False)
    try:
        t = first.create_topic("d", 24, {})
        for p in range(24):
            put(first, [(t.topic_id, p, 1, 70, T0)])
        config = PlannerConfig(rules=MergeRules(min_level0_chunks=1))
        mds = [LocalMetadataClient(first), LocalMetadataClient(second)]
        results = await asyncio.gather(*(claim_jobs(m, config=config, max_jobs=100) for m in mds))
        claimed = [(w.topic_id, w.partition) for jobs in results for j in jobs for w in j.partitions]
        assert len(claimed) == len(set(claimed))
        assert len(claimed) == 24  # nothing is left unclaimed: a planner only skips what is taken
        for m in mds:
            await m.close()
    finally:
        second.close()
        first.close()


def test_racing_claims_on_postgresql(pg_url: str) -> None:
    """Many threads over two services claim overlapping partition sets at the same moment
    (FOR UPDATE SKIP LOCKED): no partition is ever held by two leases."""
    services = [MetadataService.from_url(pg_url), MetadataService.from_url(pg_url, migrate=False)]
    try:
        t = services[0].create_topic("c", 16, {"cleanup.policy": "compact"})
        keys = [PartitionKey(t.topic_id, p) for p in range(16)]
        warmup = services[0].claim_compaction_job(keys, "warmup", LEASE_MS)  # creates the state rows
        assert warmup is not None
        services[0].release_compaction_lease(warmup.token)
        barrier = threading.Barrier(8)
        won: list[list[PartitionKey]] = []
        lock = threading.Lock()

        def worker(i: int) -> None:
            metadata_service = services[i % 2]
            barrier.wait()
            for start in range(0, 16, 2):
                want = keys[(start + i) % 16 : (start + i) % 16 + 3]
                if want and metadata_service.claim_compaction_job(want, f"w{i}", LEASE_MS) is not None:
                    with lock:
                        won.append(want)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        flat = [k for w in won for k in w]
        assert flat and len(flat) == len(set(flat))
    finally:
        for s in services:
            s.close()
