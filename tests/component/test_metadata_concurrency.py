"""Invariants of the metadata service under concurrency and failures, on SQLite and on a
real PostgreSQL: many threads and several processes committing files that overlap in
partitions (with idempotent producers retrying), compactions racing commits, and
transactions failing half way.

Checked after each run, per partition: the chunks cover [0, high_watermark) exactly, in
order, without overlap or gap; the high watermark equals the offsets of every accepted
batch; every accepted batch got a distinct offset range; a retried batch got its original
offset back and was not stored twice; no commit was lost; every file without chunks is
`deleting` and every file with chunks `live`.
"""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from skiff.metadata.compaction import swap as compaction_swap
from skiff.metadata.errors import ConflictError, MetadataError
from skiff.metadata.inspection import count_rows, file_states, partition_chunks
from skiff.metadata.schema import chunks as chunks_t
from skiff.metadata.schema import files as files_t
from skiff.metadata.schema import producer_state as producer_state_t
from skiff.metadata.service import MetadataService
from skiff.metadata.types import BatchSpec, ChunkSpec, FileSpec, OutputChunk, PartitionKey
from sqlalchemy import select

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 4


@dataclass(frozen=True)
class Accepted:
    topic_id: str
    partition: int
    base_offset: int
    offset_count: int
    producer_id: int
    seq: int
    duplicate: bool  # a retry: base_offset must be the original one


def _worker(
    url_or_service: str | MetadataService, topic_ids: list[str], seed: int, n_files: int
) -> list[Accepted]:
    """Commit `n_files` files, each touching a random subset of partitions, some batches
    from an idempotent producer, some of them retries of earlier batches."""
    own = isinstance(url_or_service, str)
    svc = (
        MetadataService.from_url(url_or_service, migrate=False)
        if isinstance(url_or_service, str)
        else url_or_service
    )
    try:
        rng = random.Random(seed)
        pid, epoch = svc.init_producer_id()
        next_seq: dict[tuple[str, int], int] = defaultdict(int)
        sent: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)  # (seq, n)
        out: list[Accepted] = []
        keys = [(t, p) for t in topic_ids for p in range(PARTITIONS)]
        for _ in range(n_files):
            chosen = rng.sample(keys, rng.randint(1, len(keys)))
            chosen.sort()  # an agent's file holds chunks sorted by (topic id, partition)
            pos = 0
            specs: list[ChunkSpec] = []
            expect: list[list[tuple[int, int, bool]]] = []  # per batch: (seq or -1, n, is_retry)
            for t, p in chosen:
                batches: list[BatchSpec] = []
                meta: list[tuple[int, int, bool]] = []
                for _b in range(rng.randint(1, 3)):
                    n = rng.randint(1, 5)
                    if rng.random() < 0.5:
                        batches.append(BatchSpec(pos, 70, n, n, 1000))
                        meta.append((-1, n, False))
                    elif sent[(t, p)] and rng.random() < 0.3:
                        seq, n = rng.choice(sent[(t, p)][-5:])  # retry one of the last five
                        batches.append(BatchSpec(pos, 70, n, n, 1000, pid, epoch, seq))
                        meta.append((seq, n, True))
                    else:
                        seq = next_seq[(t, p)]
                        next_seq[(t, p)] += n
                        sent[(t, p)].append((seq, n))
                        batches.append(BatchSpec(pos, 70, n, n, 1000, pid, epoch, seq))
                        meta.append((seq, n, False))
                    pos += 70
                specs.append(ChunkSpec(uuid.UUID(t), p, tuple(batches)))
                expect.append(meta)
            results = svc.commit_file(FileSpec(f"f/{uuid.uuid4().hex}", pos, 0, f"w{seed}"), specs)
            for (t, p), r, meta in zip(chosen, results, expect, strict=True):
                assert r.error_code == 0, r
                for b, (seq, n, retry) in zip(r.batches, meta, strict=True):
                    assert b.error_code == 0, (b, seq, retry)
                    # A retry inside one file of a batch first sent in the same file is also
                    # a duplicate; the checker matches duplicates by (producer, seq).
                    out.append(Accepted(t, p, b.base_offset, n, pid if seq >= 0 else -1, seq, retry))
        return out
    finally:
        if own:
            svc.close()


def _process_worker(args: tuple[str, list[str], int, int]) -> list[Accepted]:
    return _worker(*args)


def check_invariants(svc: MetadataService, accepted: list[Accepted], topic_ids: list[str]) -> None:
    by_part: dict[tuple[str, int], list[Accepted]] = defaultdict(list)
    for a in accepted:
        by_part[(a.topic_id, a.partition)].append(a)
    for t in topic_ids:
        for p in range(PARTITIONS):
            chunks = partition_chunks(svc.engine, uuid.UUID(t), p)
            (state,) = svc.partition_states([PartitionKey(uuid.UUID(t), p)])
            expected = 0
            for c in chunks:
                assert c.base_offset == expected, f"gap or overlap in {t}/{p} at {expected}: {c}"
                expected = c.last_offset + 1
            assert expected == state.high_watermark, (t, p, expected, state)
            # Originals: distinct, exactly covering [0, hwm); retries: their original offset.
            originals: dict[tuple[int, int], int] = {}
            ranges = []
            for a in by_part[(t, p)]:
                if a.producer_id >= 0 and (a.producer_id, a.seq) in originals:
                    assert originals[(a.producer_id, a.seq)] == a.base_offset, a
                    continue
                assert not a.duplicate, f"a retry was stored as new: {a}"
                if a.producer_id >= 0:
                    originals[(a.producer_id, a.seq)] = a.base_offset
                ranges.append((a.base_offset, a.base_offset + a.offset_count))
            ranges.sort()
            pos = 0
            for lo, hi in ranges:
                assert lo == pos, f"offsets of {t}/{p} not contiguous at {pos}: {lo}"
                pos = hi
            assert pos == state.high_watermark
    with svc.engine.connect() as conn:
        rows = conn.execute(select(files_t.c.id, files_t.c.state)).all()
        with_chunks = {r[0] for r in conn.execute(select(chunks_t.c.file_id).distinct())}
        for r in conn.execute(select(producer_state_t.c.batches)):
            assert len(r.batches) <= 5
    for fid, state in rows:
        assert state == ("live" if fid in with_chunks else "deleting"), (fid, state)


@pytest.fixture
def svc(db_url: str) -> Iterator[MetadataService]:
    s = MetadataService.from_url(db_url)
    yield s
    s.close()


def _topics(svc: MetadataService, n: int = 2) -> list[str]:
    return [str(svc.create_topic(f"t{i}", PARTITIONS, {}).topic_id) for i in range(n)]


def test_threads_commit_concurrently(svc: MetadataService) -> None:
    topic_ids = _topics(svc)
    results: list[list[Accepted]] = [[] for _ in range(8)]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = _worker(svc, topic_ids, i, 25)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=200)
    assert not any(th.is_alive() for th in threads), "commits deadlocked or hung"
    assert not errors, errors
    accepted = [a for r in results for a in r]
    assert sum(1 for a in accepted if a.duplicate) > 10  # the retries did happen
    check_invariants(svc, accepted, topic_ids)
    assert count_rows(svc.engine)["files"] == 8 * 25  # no lost commit
    assert svc.commits.combiner is not None and svc.commits.combiner.requests == 8 * 25
    assert svc.commits.combiner.groups < svc.commits.combiner.requests  # concurrent commits were grouped


@pytest.mark.slow
def test_processes_commit_concurrently(svc: MetadataService, db_url: str) -> None:
    topic_ids = _topics(svc)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        async_result = pool.map_async(_process_worker, [(db_url, topic_ids, 100 + i, 20) for i in range(4)])
        per_proc = async_result.get(timeout=200)
    accepted = [a for r in per_proc for a in r]
    check_invariants(svc, accepted, topic_ids)
    assert count_rows(svc.engine)["files"] == 4 * 20


def test_concurrent_create_topic_same_name(svc: MetadataService) -> None:
    outcomes: list[object] = []
    barrier = threading.Barrier(8)

    def run() -> None:
        barrier.wait()
        try:
            outcomes.append(svc.create_topic("same", 3, {}))
        except MetadataError as e:
            outcomes.append(e.error_code)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert sorted(o for o in outcomes if isinstance(o, int)) == [36] * 7
    assert count_rows(svc.engine)["partitions"] == 3


def test_compaction_races_commits(svc: MetadataService) -> None:
    """Compactors merge adjacent chunks of partitions (several partitions of one file, in
    parallel) while committers append: offsets never change, nothing overlaps, files
    left without chunks are marked for GC and no other file is."""
    topic_ids = _topics(svc, 1)
    tid = uuid.UUID(topic_ids[0])
    stop = threading.Event()
    errors: list[BaseException] = []
    merged = [0]
    conflicts = [0]

    def compactor(partition: int) -> None:
        n = 0
        while not stop.is_set() or n < 3:
            n += 1
            time.sleep(0.002)
            chunks = partition_chunks(svc.engine, tid, partition)
            if len(chunks) < 2:
                continue
            a, b = chunks[0], chunks[1]
            out = OutputChunk(
                tid,
                partition,
                0,
                a.byte_length + b.byte_length,
                a.base_offset,
                b.last_offset,
                a.record_count + b.record_count,
                2,
                max(a.max_timestamp, b.max_timestamp),
            )
            try:
                svc.replace_chunks(
                    [a.chunk_id, b.chunk_id], FileSpec(f"c/{uuid.uuid4().hex}", out.byte_length, 1), [out]
                )
                merged[0] += 1
            except ConflictError:
                conflicts[0] += 1

    def guarded(fn, *args):  # type: ignore[no-untyped-def]
        def run() -> None:
            try:
                fn(*args)
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        return threading.Thread(target=run)

    results: list[list[Accepted]] = [[] for _ in range(4)]

    def committer(i: int) -> None:
        results[i] = _worker(svc, topic_ids, 1000 + i, 20)

    compactors = [guarded(compactor, p) for p in range(PARTITIONS)] + [guarded(compactor, 0)]
    committers = [guarded(committer, i) for i in range(4)]
    for th in compactors + committers:
        th.start()
    for th in committers:
        th.join(timeout=200)
    stop.set()
    for th in compactors:
        th.join(timeout=60)
    assert not any(th.is_alive() for th in compactors + committers), "deadlock or hang"
    assert not errors, errors
    assert merged[0] > 0
    check_invariants(svc, [a for r in results for a in r], topic_ids)
    for p in range(PARTITIONS):
        chunks = partition_chunks(svc.engine, tid, p)
        total = sum(c.record_count for c in chunks)
        (state,) = svc.partition_states([PartitionKey(tid, p)])
        assert total == state.high_watermark  # merging never loses or invents records


# ------------------------------------------------------------------ failure injection


def _snapshot(svc: MetadataService) -> tuple[object, ...]:
    with svc.engine.connect() as conn:
        return tuple(
            sorted(tuple(str(v) for v in r) for r in conn.execute(select(t)))
            for t in (files_t, chunks_t, producer_state_t)
        ) + (count_rows(svc.engine),)


class Boom(RuntimeError):
    pass


def test_failed_commit_leaves_no_trace(svc: MetadataService, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail a commit after its writes ran inside the transaction: nothing of it remains.
    The dialect's `write_commit` holds every write on both backends (one statement on
    PostgreSQL); on SQLite the writes are separate statements, so also fail between them."""
    t = svc.create_topic("t", 2, {})
    tid = t.topic_id

    def spec(seq: int, pos: int = 0) -> list[ChunkSpec]:
        return [
            ChunkSpec(tid, 0, (BatchSpec(pos, 70, 2, 2, 1, 11, 0, seq), BatchSpec(pos + 70, 70, 1, 1, 1))),
            ChunkSpec(tid, 1, (BatchSpec(pos + 140, 70, 3, 3, 1),)),
        ]

    svc.commit_file(FileSpec("f/ok", 300), spec(0))
    before = _snapshot(svc)
    # The dialect holds the commit's writes: one statement on PostgreSQL, several on SQLite.
    dialect = type(svc.dialect)
    hooks = (
        ["write_commit"]
        if svc.dialect.name == "postgresql"
        else ["write_commit", "insert_runs", "set_high_watermarks"]
    )
    for fail_in in hooks:
        real = getattr(dialect, fail_in)

        def failing(self: object, *args, _real=real, **kwargs):  # type: ignore[no-untyped-def]
            _real(self, *args, **kwargs)  # the statements ran inside the transaction ...
            raise Boom("injected")  # ... and then the commit fails

        monkeypatch.setattr(dialect, fail_in, failing)
        with pytest.raises(Boom):
            svc.commit_file(FileSpec("f/failed", 300), spec(2))
        monkeypatch.undo()
        assert _snapshot(svc) == before, fail_in
    states = svc.partition_states([PartitionKey(tid, 0), PartitionKey(tid, 1)])
    assert [s.high_watermark for s in states] == [3, 3]
    # The same batch again (the agent retries): it is new, not a duplicate of the failed one.
    r = svc.commit_file(FileSpec("f/failed", 300), spec(2))
    assert [b.base_offset for b in r[0].batches] == [3, 5] and r[1].batches[0].base_offset == 3
    assert file_states(svc.engine, ["f/failed"]) == {"f/failed": "live"}


def test_failed_replace_leaves_no_trace(svc: MetadataService, monkeypatch: pytest.MonkeyPatch) -> None:
    t = svc.create_topic("t", 1, {})
    tid = t.topic_id
    for i in range(2):
        svc.commit_file(FileSpec(f"f/{i}", 100), [ChunkSpec(tid, 0, (BatchSpec(0, 70, 2, 2, 1),))])
    a, b = partition_chunks(svc.engine, tid, 0)
    before = _snapshot(svc)
    real = compaction_swap.mark_orphan_files_deleting

    def failing(*args, **kwargs):  # type: ignore[no-untyped-def]
        real(*args, **kwargs)
        raise Boom("injected")

    monkeypatch.setattr(compaction_swap, "mark_orphan_files_deleting", failing)
    out = OutputChunk(tid, 0, 0, 140, 0, 3, 4, 2, 1)
    with pytest.raises(Boom):
        svc.replace_chunks([a.chunk_id, b.chunk_id], FileSpec("c/1", 140, 1), [out])
    monkeypatch.undo()
    assert _snapshot(svc) == before
    svc.replace_chunks([a.chunk_id, b.chunk_id], FileSpec("c/1", 140, 1), [out])
    assert file_states(svc.engine, ["f/0", "f/1", "c/1"]) == {
        "f/0": "deleting",
        "f/1": "deleting",
        "c/1": "live",
    }


# ------------------------------------------------------------------ group commit


def test_group_commit_semantics(svc: MetadataService) -> None:
    """Files committed in one group get exactly what they would get one by one, in order."""
    t = svc.create_topic("t", 2, {})
    tid = t.topic_id

    def item(key: str, *batches: tuple[int, int, int]) -> tuple[FileSpec, list[ChunkSpec]]:
        """batches: (partition, offsets, sequence or -1)"""
        specs = [
            ChunkSpec(tid, p, (BatchSpec(i * 70, 70, n, n, 1, 7 if seq >= 0 else -1, 0, seq),))
            for i, (p, n, seq) in enumerate(batches)
        ]
        return FileSpec(key, 70 * len(batches)), specs

    # Two new files on the same partitions; the second holds a retry of the first's batch.
    a = item("g/a", (0, 2, 0), (1, 1, -1))
    b = item("g/b", (0, 2, 0), (0, 3, 2), (1, 4, -1))
    ra, rb = svc.commits.commit_group([a, b])
    assert [x.batches[0].base_offset for x in ra] == [0, 0]
    assert [x.batches[0].base_offset for x in rb] == [0, 2, 1]  # duplicate -> original offset 0
    assert [s.high_watermark for s in svc.partition_states([PartitionKey(tid, 0), PartitionKey(tid, 1)])] == [
        5,
        5,
    ]
    # A group holding an already committed file falls back to one transaction per file:
    # the old one is answered as a re-commit, the new one commits.
    c = item("g/c", (1, 1, -1))
    ra2, rc = svc.commits.commit_group([a, c])
    assert ra2 == ra and rc[0].batches[0].base_offset == 5
    # The same key twice in a group: committed once, then answered as a re-commit.
    d = item("g/d", (0, 1, -1))
    rd1, rd2 = svc.commits.commit_group([d, d])
    assert rd1 == rd2 and rd1[0].batches[0].base_offset == 5
    assert svc.partition_states([PartitionKey(tid, 0)])[0].high_watermark == 6
    rows = count_rows(svc.engine)
    assert rows["files"] == 4 and rows["chunks"] == 6  # b's duplicate has no chunk row
    check_invariants(svc, [], [])


def test_group_committer_order_errors_and_handoff() -> None:
    from skiff.metadata.commits.batching import GroupCommitter

    seen: list[list[int]] = []
    release = threading.Event()

    def run_group(reqs: list[int]) -> list[int]:
        if not seen:
            release.wait(10)  # hold the first group so that the others queue up
        seen.append(list(reqs))
        if -1 in reqs:
            raise ValueError("bad group")
        return [r * 10 for r in reqs]

    gc: GroupCommitter[int, int] = GroupCommitter(run_group, max_items=3)
    out: dict[int, object] = {}

    def call(i: int) -> None:
        try:
            out[i] = gc.submit(i)
        except ValueError as e:
            out[i] = e

    first = threading.Thread(target=call, args=(0,))
    first.start()
    time.sleep(0.1)
    others = []
    for i in [1, 2, 3, -1, 5]:
        th = threading.Thread(target=call, args=(i,))
        th.start()
        others.append(th)
        time.sleep(0.05)  # arrival order
    release.set()
    for th in [first, *others]:
        th.join(10)
    assert seen == [[0], [1, 2, 3], [-1, 5]]
    assert out[0] == 0 and out[1] == 10 and out[3] == 30
    assert isinstance(out[-1], ValueError) and isinstance(out[5], ValueError)
    assert (gc.groups, gc.requests) == (3, 6)
    assert gc.submit(9) == 90  # idle again: the caller leads at once
