"""Randomised compaction of transactional data against a model of Kafka's cleaner
(`LogCleaner` with `CleanedTransactionMetadata`), at component level: the real metadata
service (SQLite and PostgreSQL, an injected clock), a memory:// bucket, the real planner,
leases, job runner and swap, as `skiff compact` runs them.

Hypothesis draws steps over one compacted topic (2 partitions):

- produce: one agent file whose batches per partition are non-transactional keyed
  records, transactional keyed records of one of three producers (opening its
  transaction in the partition), or a producer's COMMIT/ABORT marker (closing it);
  committed to metadata, which assigns offsets and keeps `txn_open` / `txn_aborted`;
- compact: every job the planner offers; before each runs, the model cleans: the plan
  must stop below the model's last stable offset and name exactly the model's aborted
  transactions below its cleanable end; aborted batches never enter the key map and
  are dropped; committed transactional records dedup like others; a marker is kept
  while a batch of its transaction was met in the clean, else gets a delete horizon, and
  goes at a clean past it (kept empty when it is its producer's last batch);
- tick: the clock moves.

After every step each partition reads back from every chunk row (records with their
offsets, markers with their delete horizons, empty batches) exactly as the model says, the `txn_aborted` rows are the
model's, and the cleaner checkpoint is the model's. At the end every transaction is
closed and cleaning repeated past every horizon: no aborted record and no `txn_aborted`
row remains; a last transaction of every producer then lets the emptied markers go.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st
from skiff.compactor.keymap import KeyMap
from skiff.compactor.plan import JobPlan, PartitionWork
from skiff.fileformat.objectstore.memory import MemoryStore
from skiff.fileformat.record_build import build_batch, build_control_batch
from skiff.fileformat.record_decode import ControlRecordType, Record
from skiff.fileformat.segment import ChunkInput
from skiff.metadata.rows import LOC_COLS, location_of
from skiff.metadata.schema import chunks, files, txn_aborted
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import BatchSpec, ChunkSpec, FileSpec
from sqlalchemy import select

from tests.support import compaction_model
from tests.support.compaction_model import (
    LAG_MS,
    T0,
    Clock,
    Compact,
    Tick,
    assert_checkpoints,
    clean_until,
    compact_until_settled,
    compacted_config,
    keymap_budget_bytes_st,
    model_settings,
    put_segment,
    read_chunk,
    roll_bytes_st,
    run_in_bucket,
    run_steps,
    runner_config,
)

PARTITIONS = 2
KEYS = 6
PRODUCERS = 3

service = compaction_model.service  # the fixture: SQLite and PostgreSQL, an injected clock
PartKey = tuple[uuid.UUID, int]


@dataclass
class MBatch:
    base: int
    last: int
    pid: int  # -1: not transactional
    control: int  # -1 data, 0 ABORT, 1 COMMIT
    records: dict[int, tuple[bytes, bytes]]  # offset -> (key, value); a marker: {}
    horizon: int | None = None  # a marker's delete horizon
    empty: bool = False  # kept header-only (RETAIN_EMPTY)


@dataclass
class MPart:
    batches: list[MBatch] = field(default_factory=list)
    open: dict[int, int] = field(default_factory=dict)  # producer id -> first offset
    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # txn_aborted rows
    first_dirty: int = 0
    next_offset: int = 0
    seq: dict[int, int] = field(default_factory=dict)

    @property
    def lso(self) -> int:
        return min(self.open.values(), default=self.next_offset)

    def is_aborted(self, b: MBatch) -> bool:
        return (
            b.pid >= 0
            and b.control < 0
            and any(p == b.pid and f <= b.base <= la for p, f, la in self.aborted)
        )


@dataclass
class World:
    svc: MetadataService
    md: LocalMetadataClient
    store: MemoryStore
    clock: Clock
    topic: uuid.UUID
    keymap_budget_bytes: int
    parts: dict[PartKey, MPart]
    pids: list[int]
    txn_ids: list[str]  # the producers' transactional ids (the commit checks their records)
    files: int = 0
    roll_bytes: int = 1 << 20  # 1: every input chunk ends an output file (a swap each)


def _new_world(svc: MetadataService, clock: Clock, keymap_budget_bytes: int) -> World:
    clock.now = max(clock.now, T0)
    tag = uuid.uuid4().hex[:8]
    t = svc.create_topic(
        f"t-{tag}",
        PARTITIONS,
        compacted_config(),
    )
    # Each producer's transaction holds both partitions and stays ongoing: the model writes
    # markers straight into files (no EndTxn), which close a transaction in a partition
    # without ending its record, so every later transactional batch is accepted by the commit.
    txn_ids = [f"m-{tag}-{i}" for i in range(PRODUCERS)]
    pids = []
    for txn_id in txn_ids:
        init = svc.transactions.init_producer_id(txn_id, svc.transactions.max_timeout_ms)
        svc.transactions.add_partitions(
            txn_id, init.producer_id, init.producer_epoch, [(str(t.topic_id), p) for p in range(PARTITIONS)]
        )
        assert init.producer_epoch == 0
        pids.append(init.producer_id)
    return World(
        svc,
        LocalMetadataClient(svc),
        MemoryStore(f"txnmodel-{tag}"),
        clock,
        t.topic_id,
        keymap_budget_bytes,
        {(t.topic_id, p): MPart() for p in range(PARTITIONS)},
        pids,
        txn_ids,
    )


# ------------------------------------------------------------------ steps


@dataclass(frozen=True)
class Op:
    kind: str  # "plain", "txn", "commit", "abort"
    producer: int
    keys: tuple[int, ...]


@dataclass(frozen=True)
class Produce:
    agent: int
    ops: tuple[tuple[int, tuple[Op, ...]], ...]  # per partition written


op_st = st.builds(
    Op,
    kind=st.sampled_from(["plain", "plain", "txn", "txn", "txn", "commit", "abort"]),
    producer=st.integers(0, PRODUCERS - 1),
    keys=st.lists(st.integers(0, KEYS - 1), min_size=1, max_size=4).map(tuple),
)
produce_st = st.builds(
    Produce,
    agent=st.integers(0, 2),
    ops=st.lists(
        st.tuples(st.integers(0, PARTITIONS - 1), st.lists(op_st, min_size=1, max_size=4).map(tuple)),
        min_size=1,
        max_size=PARTITIONS,
        unique_by=lambda x: x[0],
    ).map(lambda xs: tuple(sorted(xs))),
)
step_st = st.one_of(
    produce_st, produce_st, produce_st, st.just(Compact()), st.builds(Tick, st.sampled_from([10, 400, 1_200]))
)


def _produce(w: World, step: Produce) -> None:
    """One agent file, committed; offsets, open and aborted transactions into the model.
    A marker for a producer with no transaction open in the partition is not written (a
    coordinator writes markers only to the transaction's partitions)."""
    now = w.clock.now
    chunk_inputs: list[ChunkInput] = []
    planned: list[tuple[PartKey, list[tuple[Op, list[tuple[bytes, bytes]], BatchSpec]]]] = []
    opening: dict[PartKey, set[int]] = {}
    for partition, ops in step.ops:
        p = (w.topic, partition)
        mp = w.parts[p]
        is_open = set(mp.open)
        built: list[bytes] = []
        items: list[tuple[Op, list[tuple[bytes, bytes]], BatchSpec]] = []
        for i, op in enumerate(ops):
            pid = w.pids[op.producer]
            if op.kind in ("commit", "abort"):
                if pid not in is_open:
                    continue
                is_open.discard(pid)
                ctype = ControlRecordType.COMMIT if op.kind == "commit" else ControlRecordType.ABORT
                b = build_control_batch(
                    ctype, producer_id=pid, producer_epoch=0, coordinator_epoch=0, timestamp=now
                )
                spec = BatchSpec(0, len(b), 1, 1, now, pid, 0, -1, 0, True, int(ctype))
                items.append((op, [], spec))
                built.append(b)
                continue
            recs = [(b"k%d" % k, b"v%d-%d-%d-%d" % (w.files, partition, i, d)) for d, k in enumerate(op.keys)]
            if op.kind == "plain":
                b = build_batch([Record(d, now, k, v, ()) for d, (k, v) in enumerate(recs)])
                spec = BatchSpec(0, len(b), len(recs), len(recs), now)
            else:
                is_open.add(pid)
                seq = mp.seq.get(pid, 0)
                mp.seq[pid] = seq + len(recs)
                b = build_batch(
                    [Record(d, now, k, v, ()) for d, (k, v) in enumerate(recs)],
                    producer_id=pid,
                    producer_epoch=0,
                    base_sequence=seq,
                    is_transactional=True,
                )
                spec = BatchSpec(
                    0, len(b), len(recs), len(recs), now, pid, 0, seq, 0, True, -1, w.txn_ids[op.producer]
                )
            items.append((op, recs, spec))
            built.append(b)
        if not built:
            continue
        chunk_inputs.append(
            ChunkInput(w.topic, partition, built, len(built), sum(len(r) for _, r, _ in items))
        )
        planned.append((p, items))
        opening[p] = is_open
    if not chunk_inputs:
        return
    key, data, by_part = put_segment(w.store, step.agent, chunk_inputs)
    w.files += 1
    specs = []
    for p, items in planned:
        pl = by_part[p]
        specs.append(
            ChunkSpec(
                p[0],
                p[1],
                tuple(
                    BatchSpec(pos, s.byte_length, *[getattr(s, f) for f in _SPEC_FIELDS])
                    for pos, (_, _, s) in zip(pl.batch_positions, items, strict=True)
                ),
            )
        )
    results = w.svc.commit_file(FileSpec(key, len(data), 0, f"a{step.agent}"), specs)
    for res, (p, items) in zip(results, planned, strict=True):
        assert res.error_code == 0, res
        mp = w.parts[p]
        for br, (op, recs, spec) in zip(res.batches, items, strict=True):
            assert br.error_code == 0, br
            base = br.base_offset
            last = base + spec.offset_count - 1
            pid = spec.producer_id
            if op.kind in ("commit", "abort"):
                first = mp.open.pop(pid)
                if op.kind == "abort":
                    mp.aborted.append((pid, first, base))
                mp.batches.append(MBatch(base, last, pid, spec.control_type, {}))
            else:
                if op.kind == "txn":
                    mp.open.setdefault(pid, base)
                mp.batches.append(MBatch(base, last, pid, -1, {base + d: r for d, r in enumerate(recs)}))
            mp.next_offset = last + 1


_SPEC_FIELDS = (
    "offset_count",
    "record_count",
    "max_timestamp",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "timestamp_type",
    "is_transactional",
    "control_type",
    "transactional_id",
)


def model_clean(mp: MPart, work: PartitionWork, consumed_end: int, max_keys: int, now: int) -> None:
    """Kafka's cleaner on the model (see the module docstring)."""
    fd, ce = work.first_dirty_offset, max(work.cleanable_end_offset, work.first_dirty_offset)
    traversed = [b for b in mp.batches if b.base < consumed_end]
    m: dict[bytes, int] = {}
    covered_end = ce
    full = False
    for b in traversed:
        if b.control >= 0 or mp.is_aborted(b) or full:
            continue
        for off in sorted(b.records):
            if fd <= off < ce:
                if len(m) >= max_keys:
                    covered_end, full = off, True
                    break
                m[b.records[off][0]] = off
    producer_last = {b.pid: b.last for b in traversed if b.pid >= 0}
    met: set[int] = set()
    keep: list[MBatch] = []
    for b in mp.batches:
        if b.base >= consumed_end:
            keep.append(b)
            continue
        below = b.last < covered_end
        last_of_producer = b.pid >= 0 and producer_last.get(b.pid) == b.last
        if b.control >= 0:
            was_met = b.pid in met
            met.discard(b.pid)
            if b.empty and not last_of_producer:
                continue  # Kafka: an empty control batch was cleaned already; DELETE_EMPTY
            if below and not was_met and not b.empty:
                if b.horizon is not None and now >= b.horizon:
                    if b.control == 0:
                        mp.aborted = [a for a in mp.aborted if (a[0], a[2]) != (b.pid, b.base)]
                    if last_of_producer:
                        keep.append(MBatch(b.base, b.last, b.pid, b.control, {}, None, True))
                    continue
                if b.horizon is None:
                    b.horizon = now + work.delete_retention_ms
            keep.append(b)
            continue
        if b.pid >= 0:
            met.add(b.pid)
        if below and mp.is_aborted(b):
            b.records = {}
        else:
            b.records = {
                off: r for off, r in b.records.items() if off >= covered_end or m.get(r[0], -1) <= off
            }
        if b.records:
            keep.append(b)
        elif last_of_producer:  # RETAIN_EMPTY; an empty batch no longer its producer's last goes
            b.empty = True
            keep.append(b)
    mp.batches = keep
    mp.first_dirty = covered_end


async def _compact(w: World) -> None:
    config = runner_config("txn-model-test", w.clock, w.keymap_budget_bytes, w.roll_bytes)
    max_keys = KeyMap(w.keymap_budget_bytes).max_keys

    def before_run(plan: JobPlan) -> None:
        for work in plan.partitions:
            p = (work.topic_id, work.partition)
            mp = w.parts[p]
            assert work.first_dirty_offset == mp.first_dirty
            # nothing at or above the last stable offset is cleaned
            assert work.cleanable_end_offset <= mp.lso
            assert list(work.aborted) == sorted(
                (a for a in mp.aborted if a[1] < work.cleanable_end_offset), key=lambda a: a[1]
            )
            consumed_end = max(
                ch.location.last_offset + 1
                for f in plan.files
                for ch in f.chunks
                if (ch.topic_id, ch.partition) == p
            )
            model_clean(mp, work, consumed_end, max_keys, plan.now_ms)

    name = w.svc.topics_by_id([w.topic])[w.topic].name
    for done in await compact_until_settled(w.md, w.store, [name], config, before_run):
        assert set(done.result.stats.gets_per_input_file.values()) == {2}


def _read(
    w: World, p: PartKey
) -> tuple[
    list[tuple[int, bytes | None, bytes | None]], list[tuple[int, int | None]], list[tuple[int, bool]]
]:
    """(data records (offset, key, value), markers (offset, delete horizon), empty
    batches (base offset, control?)) as stored."""
    # every chunk row (a fetch skips rows without records: those holding only empty batches)
    c = chunks.c
    with w.svc.engine.connect() as conn:
        rows = conn.execute(
            select(*LOC_COLS)
            .select_from(chunks.join(files, files.c.id == c.file_id))
            .where(c.topic_id == p[0], c.partition == p[1])
            .order_by(c.base_offset)
        ).all()
    records, markers, empties = [], [], []
    for loc in map(location_of, rows):
        for cb, decoded in read_chunk(w.store, loc):
            if cb.header.records_count == 0:
                empties.append((cb.base_offset, cb.header.is_control))
            for off, r in decoded:
                if cb.header.is_control:
                    markers.append((off, cb.header.delete_horizon_ms))
                else:
                    records.append((off, r.key, r.value))
    return records, markers, empties


def _check(w: World) -> None:
    for p, mp in w.parts.items():
        records, markers, empties = _read(w, p)
        want = sorted((off, k, v) for b in mp.batches for off, (k, v) in b.records.items())
        assert records == want, f"partition {p[1]}: records differ from Kafka's cleaner"
        assert markers == [(b.base, b.horizon) for b in mp.batches if b.control >= 0 and not b.empty]
        assert empties == [(b.base, b.control >= 0) for b in mp.batches if b.empty], "RETAIN_EMPTY differs"
        with w.svc.engine.connect() as conn:
            rows = conn.execute(
                select(
                    txn_aborted.c.producer_id, txn_aborted.c.first_offset, txn_aborted.c.last_offset
                ).where(txn_aborted.c.topic_id == p[0], txn_aborted.c.partition == p[1])
            ).all()
        assert sorted(tuple(r) for r in rows) == sorted(mp.aborted)
    assert_checkpoints(w.svc, list(w.parts), lambda p: w.parts[p].first_dirty)


@model_settings(max_examples=30)
@given(
    steps=st.lists(step_st, min_size=1, max_size=16),
    keymap_budget_bytes=keymap_budget_bytes_st,
    roll_bytes=roll_bytes_st,
)
def test_transactional_compaction_matches_kafkas_cleaner(
    service: tuple[MetadataService, Clock],
    steps: list[Produce | Compact | Tick],
    keymap_budget_bytes: int,
    roll_bytes: int,
) -> None:
    svc, clock = service
    w = _new_world(svc, clock, keymap_budget_bytes)
    w.roll_bytes = roll_bytes
    run_in_bucket(w.store, lambda: _run(w, steps))


async def _run(w: World, steps: list[Produce | Compact | Tick]) -> None:
    await run_steps(steps, w.clock, lambda step: _produce(w, step), lambda: _compact(w), lambda: _check(w))
    # The end: every transaction closed (aborts and commits alternate), then a dirty
    # write and a clean past every horizon, until no aborted record and no txn_aborted
    # row is left (data goes first, its marker gets a horizon at a later clean and goes
    # at a clean past it).
    ends = tuple(
        (q, tuple(Op("abort" if i % 2 else "commit", i, (0,)) for i in range(PRODUCERS)))
        for q in range(PARTITIONS)
    )
    _produce(w, Produce(0, ends))
    _check(w)
    dirty = tuple((q, (Op("plain", 0, (KEYS,)),)) for q in range(PARTITIONS))
    await clean_until(
        lambda: not any(mp.aborted for mp in w.parts.values()),
        w.clock,
        lambda: _produce(w, Produce(0, dirty)),
        lambda: _compact(w),
        lambda: _check(w),
        "aborted transactions were not cleaned away",
    )
    for mp in w.parts.values():
        assert not any(mp.is_aborted(b) and b.records for b in mp.batches)
    # A new committed transaction of every producer: the emptied markers kept as their
    # producer's last batch are no longer its last, and go at the next clean.
    again = tuple(
        (q, tuple(Op(kind, i, (KEYS,)) for i in range(PRODUCERS) for kind in ("txn", "commit")))
        for q in range(PARTITIONS)
    )
    _produce(w, Produce(0, again))
    w.clock.now += LAG_MS + 1
    await _compact(w)
    _check(w)
