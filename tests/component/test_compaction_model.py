"""Randomised compaction against a reference model of Kafka's cleaner, at component level:
the real metadata service (SQLite and PostgreSQL, in process, an injected clock), a memory:// bucket, the
real planner, leases, job runner and swap (`compactor.planner.claim_jobs` +
`compactor.runner.run_leased_job`, as `skiff compact` runs them).

Hypothesis draws a sequence of steps over one compacted topic (3 partitions) and one
delete-policy topic (1 partition) that share agent files:

- produce: one agent file from one of three agents (writers), keyed updates and
  tombstones for some partitions, several batches (some compressed), committed to
  metadata, which assigns the offsets;
- compact: every job the planner offers now is claimed and run; before each job runs, the
  model applies Kafka's cleaner (`tests.unit.test_dedup.model_clean`: buildOffsetMap with the
  same key-map capacity, shouldRetainRecord, KIP-534 horizons) to the partitions and
  ranges the plan names;
- tick: the clock moves (tombstones pass their delete horizon, `min.compaction.lag.ms`
  lets younger data in).

After every step each partition reads back (metadata's chunk rows, the bucket's bytes,
every chunk's offset bitmap) exactly as the model says: offsets, keys, values, and each
tombstone's delete horizon once set; the delete-policy partition keeps every record; the
cleaner checkpoint is the model's. At the end, with the clock past every horizon and the
lag, compaction until nothing is left makes the compacted topic one record per live key.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from skiff.compactor.keymap import SLOT_BYTES, KeyMap
from skiff.compactor.plan import JobPlan
from skiff.fileformat.batch_header import Compression
from skiff.fileformat.objectstore.memory import MemoryStore
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record
from skiff.fileformat.segment import ChunkInput
from skiff.metadata.compaction.types import MergeRules
from skiff.metadata.server.local_client import LocalMetadataClient, SyncLocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import BatchSpec, ChunkSpec, FetchQuery, FileSpec

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
from tests.unit.test_dedup import Model, MRecord, model_clean

PARTITIONS = 3
KEYS = 12

service = compaction_model.service  # the fixture: SQLite and PostgreSQL, an injected clock
PartKey = tuple[uuid.UUID, int]


@dataclass
class World:
    svc: MetadataService
    md: LocalMetadataClient
    store: MemoryStore
    clock: Clock
    compacted: uuid.UUID
    logged: uuid.UUID
    keymap_budget_bytes: int
    model: Model = field(default_factory=Model)
    logged_records: list[tuple[int, bytes]] = field(default_factory=list)
    files: int = 0

    @property
    def parts(self) -> list[PartKey]:
        return [(self.compacted, p) for p in range(PARTITIONS)]


def _new_world(svc: MetadataService, clock: Clock, keymap_budget_bytes: int) -> World:
    clock.now = max(clock.now, T0)
    tag = uuid.uuid4().hex[:8]
    compacted = svc.create_topic(
        f"c-{tag}",
        PARTITIONS,
        compacted_config(),
    )
    logged = svc.create_topic(f"d-{tag}", 1, {})
    store = MemoryStore(f"model-{tag}")
    w = World(
        svc, LocalMetadataClient(svc), store, clock, compacted.topic_id, logged.topic_id, keymap_budget_bytes
    )
    for p in w.parts:
        w.model.live[p] = {}
        w.model.horizon[p] = {}
        w.model.next_offset[p] = 0
        w.model.first_dirty[p] = 0
    return w


# ------------------------------------------------------------------ steps


@dataclass(frozen=True)
class Produce:
    agent: int
    # per compacted partition written: batches of (key index, tombstone?)
    batches: tuple[tuple[int, tuple[tuple[tuple[int, bool], ...], ...]], ...]
    logged: int  # records for the delete-policy partition (0: none)
    codec: int


# tombstones about one record in five
record_st = st.tuples(st.integers(0, KEYS - 1), st.integers(0, 4).map(lambda n: n == 0))
batch_st = st.lists(record_st, min_size=1, max_size=5).map(tuple)
produce_st = st.builds(
    Produce,
    agent=st.integers(0, 2),
    batches=st.lists(
        st.tuples(st.integers(0, PARTITIONS - 1), st.lists(batch_st, min_size=1, max_size=3).map(tuple)),
        min_size=1,
        max_size=PARTITIONS,
        unique_by=lambda x: x[0],
    ).map(lambda xs: tuple(sorted(xs))),
    logged=st.integers(0, 3),
    codec=st.sampled_from([Compression.NONE, Compression.NONE, Compression.ZSTD, Compression.GZIP]),
)
step_st = st.one_of(
    produce_st,
    produce_st,
    st.just(Compact()),
    st.builds(Tick, st.sampled_from([10, 200, 400, 1_200])),
)


def _produce(w: World, step: Produce) -> None:
    """One agent file, committed; the offsets metadata assigns go into the model."""
    now = w.clock.now
    chunk_inputs: list[ChunkInput] = []
    contents: list[tuple[uuid.UUID, int, list[list[tuple[bytes, bytes | None]]]]] = []
    for partition, batches in step.batches:
        built, recs_of = [], []
        for i, batch in enumerate(batches):
            recs = [
                (b"k%d" % key, None if tomb else b"v%d-%d-%d" % (w.files, partition, i))
                for key, tomb in batch
            ]
            recs_of.append(recs)
            built.append(
                build_batch(
                    [Record(d, now, k, v, ()) for d, (k, v) in enumerate(recs)], compression=step.codec
                )
            )
        chunk_inputs.append(
            ChunkInput(w.compacted, partition, built, len(built), sum(len(b) for b in recs_of))
        )
        contents.append((w.compacted, partition, recs_of))
    if step.logged:
        recs = [(b"e", b"e%d-%d" % (w.files, d)) for d in range(step.logged)]
        chunk_inputs.append(
            ChunkInput(
                w.logged,
                0,
                [build_batch([Record(d, now, k, v, ()) for d, (k, v) in enumerate(recs)])],
                1,
                len(recs),
            )
        )
        contents.append((w.logged, 0, [recs]))
    key, data, by_part = put_segment(w.store, step.agent, chunk_inputs)
    w.files += 1
    specs = []
    for ci, (tid, partition, recs_of) in zip(chunk_inputs, contents, strict=True):
        pl = by_part[(tid, partition)]
        specs.append(
            ChunkSpec(
                tid,
                partition,
                tuple(
                    BatchSpec(pos, len(b), len(r), len(r), now)
                    for pos, b, r in zip(pl.batch_positions, ci.batches, recs_of, strict=True)
                ),
            )
        )
    results = w.svc.commit_file(FileSpec(key, len(data), 0, f"a{step.agent}"), specs)
    for res, (tid, partition, recs_of) in zip(results, contents, strict=True):
        assert res.error_code == 0, res
        for br, recs in zip(res.batches, recs_of, strict=True):
            assert br.error_code == 0, br
            for d, (k, v) in enumerate(recs):
                off = br.base_offset + d
                if tid == w.logged:
                    w.logged_records.append((off, v))  # type: ignore[arg-type]
                else:
                    w.model.live[(tid, partition)][off] = MRecord(off, k, v, now)
                    w.model.next_offset[(tid, partition)] = off + 1


async def _compact(w: World, roll_bytes: int = 1 << 20, swap_client: Any = None) -> None:
    """Every job the planner offers now, each checked against the model first; jobs run.
    `roll_bytes` 1 makes every input chunk end an output file (the case where a
    partition's checkpoint must still move with the file where the partition ends)."""
    rules = MergeRules(min_level0_chunks=2, min_level0_bytes=1 << 40, max_level0_delay_ms=1 << 40)
    config = runner_config("model-test", w.clock, w.keymap_budget_bytes, roll_bytes, rules)
    config = dataclasses.replace(config, swap_client=swap_client)
    max_keys = KeyMap(w.keymap_budget_bytes).max_keys
    seen: set[frozenset[tuple[int, str]]] = set()

    def before_run(plan: JobPlan) -> None:
        inputs = frozenset((ch.location.chunk_id, f.object_key) for f in plan.files for ch in f.chunks)
        assert inputs not in seen, "the planner offered the same work again"
        seen.add(inputs)
        for work in plan.partitions:
            if work.compact:
                p = (work.topic_id, work.partition)
                assert work.first_dirty_offset == w.model.first_dirty[p]
                model_clean(w.model, p, work, max_keys, plan.now_ms)

    by_id = w.svc.topics_by_id([w.compacted, w.logged])
    names = [by_id[t].name for t in (w.compacted, w.logged)]
    for done in await compact_until_settled(w.md, w.store, names, config, before_run):
        assert set(done.result.stats.gets_per_input_file.values()) <= {1, 2}


def _read(w: World, p: PartKey) -> list[tuple[int, bytes | None, bytes | None, int | None]]:
    (info,) = w.svc.find_chunks([FetchQuery(p[0], p[1], 0, 1 << 40)])
    out = []
    for loc in info.chunks:
        for cb, records in read_chunk(w.store, loc):
            out += [(off, r.key, r.value, cb.header.delete_horizon_ms) for off, r in records]
    return out


def _check(w: World) -> None:
    for p in w.parts:
        got = _read(w, p)
        offsets = [g[0] for g in got]
        assert offsets == sorted(w.model.live[p]), f"partition {p[1]}: offsets differ from Kafka's cleaner"
        for off, key, value, horizon in got:
            r = w.model.live[p][off]
            assert (key, value) == (r.key, r.value)
            if value is None and horizon is not None:
                w.model.horizon[p].setdefault(off, horizon)
                assert w.model.horizon[p][off] == horizon
    assert_checkpoints(w.svc, list(w.parts), lambda p: w.model.first_dirty[p])
    got_logged = [(off, v) for off, _k, v, _h in _read(w, (w.logged, 0))]
    assert got_logged == sorted(w.logged_records)


@model_settings(max_examples=40)
@given(
    steps=st.lists(step_st, min_size=1, max_size=14),
    keymap_budget_bytes=keymap_budget_bytes_st,
    roll_bytes=roll_bytes_st,
)
def test_compaction_matches_kafkas_cleaner(
    service: tuple[MetadataService, Clock],
    steps: list[Produce | Compact | Tick],
    keymap_budget_bytes: int,
    roll_bytes: int,
) -> None:
    svc, clock = service
    w = _new_world(svc, clock, keymap_budget_bytes)
    run_in_bucket(w.store, lambda: _run(w, steps, roll_bytes))


async def _run(w: World, steps: list[Produce | Compact | Tick], roll_bytes: int = 1 << 20) -> None:
    await run_steps(
        steps, w.clock, lambda step: _produce(w, step), lambda: _compact(w, roll_bytes), lambda: _check(w)
    )
    # The end: past every horizon and the lag, a dirty write to each partition, cleaned,
    # until the model is one record per key and no tombstone (a tombstone's horizon is set
    # by the first clean that keeps it and it goes at a later one; a small map takes
    # several cleans); the topic must read back as the model says all along.
    dirty = tuple((q, (((KEYS, False),),)) for q in range(PARTITIONS))
    await clean_until(
        lambda: all(_one_live_record_per_key(w.model.live[p]) for p in w.parts),
        w.clock,
        lambda: _produce(w, Produce(0, dirty, 0, Compression.NONE)),
        lambda: _compact(w),
        lambda: _check(w),
        "compaction did not reach one record per key",
    )


def _one_live_record_per_key(live: dict[int, MRecord]) -> bool:
    keys = [r.key for r in live.values()]
    return len(keys) == len(set(keys)) and all(r.value is not None for r in live.values())


def test_checkpoint_moves_when_the_output_rolls_at_a_partitions_last_input(
    service: tuple[MetadataService, Clock],
) -> None:
    """roll_bytes=1: every input chunk ends an output file; the cleaner checkpoint of each
    compacted partition must still move to its cleanable end (the high watermark)."""
    svc, clock = service
    w = _new_world(svc, clock, SLOT_BYTES * 4096)

    async def go() -> None:
        for agent in range(2):
            _produce(w, Produce(agent, ((0, (((0, False), (1, False)),)), (1, (((0, True),),))), 0, 0))
        w.clock.now += LAG_MS + 1
        await _compact(w, roll_bytes=1)
        _check(w)

    run_in_bucket(w.store, go)


class _CountingSwaps:
    """A blocking client that counts the swaps it forwards (and each one's thread)."""

    def __init__(self, inner: SyncLocalMetadataClient) -> None:
        self.inner = inner
        self.threads: list[str] = []

    def replace_chunks(self, *args: Any, **kwargs: Any) -> None:
        self.threads.append(threading.current_thread().name)
        self.inner.replace_chunks(*args, **kwargs)


def test_a_blocking_swap_client_takes_every_swap_from_the_jobs_thread(
    service: tuple[MetadataService, Clock],
) -> None:
    """`skiff compact` gives the jobs a blocking client (RunnerConfig.swap_client): every swap
    goes through it from the job's worker thread, and the outcome is the model's."""
    svc, clock = service
    w = _new_world(svc, clock, SLOT_BYTES * 4096)
    swaps = _CountingSwaps(SyncLocalMetadataClient(svc))

    async def go() -> None:
        for agent in range(2):
            _produce(w, Produce(agent, ((0, (((0, False), (1, False)),)), (1, (((0, True),),))), 0, 0))
        w.clock.now += LAG_MS + 1
        await _compact(w, roll_bytes=1, swap_client=swaps)
        _check(w)

    run_in_bucket(w.store, go)
    assert swaps.threads, "no swap went through the blocking client"
    assert threading.main_thread().name not in swaps.threads  # the jobs' threads, not the loop's
