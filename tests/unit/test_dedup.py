"""The compaction job against a reference model of Kafka's cleaner (memory store, in-memory
metadata model): randomised keys, updates, tombstones, several partitions and writers,
interleaved produce and compaction rounds, a small key map that fills."""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from skiff.compactor.job import run_job
from skiff.compactor.keymap import SLOT_BYTES, KeyMap
from skiff.compactor.output import Checkpoint
from skiff.compactor.plan import InputChunk, InputFile, JobPlan, PartitionWork
from skiff.fileformat.batch_header import Compression
from skiff.fileformat.chunk_reader import ChunkLocation, iter_chunk_batches
from skiff.fileformat.objectstore.memory import MemoryStore, drop_memory_bucket
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record, decode_records, validate_batch
from skiff.fileformat.segment import ChunkInput, build_segment, iter_chunks_stream
from skiff.metadata import bitmaps
from skiff.metadata.types import FileSpec, OutputChunk

COMPACT = uuid.UUID(int=0xC0)
DELETE = uuid.UUID(int=0xD0)
DRT_MS = 1_000  # delete.retention.ms


@dataclass
class MRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


@dataclass
class Model:
    """Per partition: every record ever written, what the cleaner keeps, batch horizons."""

    live: dict[tuple[uuid.UUID, int], dict[int, MRecord]] = field(default_factory=dict)
    horizon: dict[tuple[uuid.UUID, int], dict[int, int]] = field(default_factory=dict)  # offset -> horizon
    next_offset: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    first_dirty: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)


class World:
    """Object store + a metadata model applying `replace_chunks` as the service does."""

    def __init__(self, store: MemoryStore, model: Model, partitions: Sequence[tuple[uuid.UUID, int]]) -> None:
        self.store = store
        self.model = model
        self.partitions = list(partitions)
        self.chunks: dict[int, InputChunk] = {}
        self.file_sizes: dict[str, int] = {}
        self.ids = itertools.count(1)
        self.files = itertools.count(1)
        for p in partitions:
            model.live[p] = {}
            model.horizon[p] = {}
            model.next_offset[p] = 0
            model.first_dirty[p] = 0

    def produce(self, rng: random.Random, now_ms: int, keys: int, tombstone_rate: float) -> None:
        """One agent file: a few batches for some partitions (relative offsets)."""
        name = f"agent/{next(self.files):05d}"
        chunk_inputs = []
        batch_meta = []
        for p in self.partitions:
            if rng.random() < 0.3:
                continue
            batches = []
            count = 0
            first = self.model.next_offset[p]
            for _ in range(rng.randint(1, 3)):
                recs = []
                n = rng.randint(1, 6)
                for d in range(n):
                    key = b"k%d" % rng.randrange(keys)
                    value = (
                        None
                        if rng.random() < tombstone_rate
                        else b"v%d-%d" % (first + count + d, rng.randrange(99))
                    )
                    ts = now_ms - rng.randrange(1000)
                    recs.append(Record(d, ts, key, value, ()))
                    self.model.live[p][first + count + d] = MRecord(first + count + d, key, value, ts)
                codec = rng.choice([Compression.NONE, Compression.NONE, Compression.ZSTD, Compression.GZIP])
                batches.append(build_batch(recs, compression=codec))
                count += n
            self.model.next_offset[p] = first + count
            chunk_inputs.append(ChunkInput(p[0], p[1], batches, len(batches), count))
            batch_meta.append(
                (p, first, count, max(r.timestamp for r in self.model.live[p].values() if r.offset >= first))
            )
        if not chunk_inputs:
            return
        data, placements = build_segment(chunk_inputs)
        self.store.put(name, data)
        self.file_sizes[name] = len(data)
        for (p, first, count, max_ts), pl in zip(batch_meta, placements, strict=True):
            cid = next(self.ids)
            loc = ChunkLocation(
                cid, name, pl.data_position, pl.byte_length, first, first + count - 1, count, max_ts
            )
            self.chunks[cid] = InputChunk(p[0], p[1], loc)

    def swap(
        self,
        ids: Sequence[int],
        file: FileSpec,
        outputs: Sequence[OutputChunk],
        checkpoints: Sequence[Checkpoint],
    ) -> None:
        assert all(i in self.chunks for i in ids), "swap of a chunk that is gone"
        for o in outputs:
            assert (
                bitmaps.check_chunk_bitmap(o.base_offset, o.last_offset, o.present_offsets, o.record_count)
                is None
            )
        for i in ids:
            del self.chunks[i]
        self.file_sizes[file.object_key] = file.size_bytes
        for o in outputs:
            cid = next(self.ids)
            loc = ChunkLocation(
                cid,
                file.object_key,
                o.byte_position,
                o.byte_length,
                o.base_offset,
                o.last_offset,
                o.record_count,
                o.max_timestamp,
                offsets_absolute=True,
                present_offsets=o.present_offsets,
            )
            self.chunks[cid] = InputChunk(o.topic_id, o.partition, loc)
        for c in checkpoints:
            self.model.first_dirty[(c.topic_id, c.partition)] = c.first_dirty_offset

    def plan(self, now_ms: int, job_id: str, lag: int = 0) -> JobPlan:
        by_file: dict[str, list[InputChunk]] = {}
        for ic in self.chunks.values():
            by_file.setdefault(ic.location.object_key, []).append(ic)
        files = tuple(
            InputFile(k, self.file_sizes[k], tuple(sorted(v, key=lambda c: c.location.byte_position)))
            for k, v in sorted(by_file.items())
        )
        works = []
        for p in sorted(self.partitions, key=lambda p: (p[0].bytes, p[1])):
            compact = p[0] == COMPACT
            end = max(self.model.first_dirty[p], self.model.next_offset[p] - lag)
            works.append(
                PartitionWork(p[0], p[1], "t", compact, not compact, self.model.first_dirty[p], end, DRT_MS)
            )
        return JobPlan(job_id, files, tuple(works), now_ms)

    def read_partition(
        self, p: tuple[uuid.UUID, int]
    ) -> list[tuple[int, bytes | None, bytes | None, int | None]]:
        """(offset, key, value, batch horizon) of every record, through the chunk reader."""
        out = []
        locs = sorted(
            (c.location for c in self.chunks.values() if (c.topic_id, c.partition) == p),
            key=lambda loc: loc.base_offset,
        )
        for loc in locs:
            data = self.store.get_range(loc.object_key, loc.byte_position, loc.byte_length)
            present = bitmaps.present_set(loc)
            seen = []
            for cb in iter_chunk_batches(loc, data, verify_crc=True):
                for r in decode_records(data, cb.position, header=cb.header):
                    off = cb.base_offset + r.offset_delta
                    seen.append(off - loc.base_offset)
                    out.append((off, r.key, r.value, cb.header.delete_horizon_ms))
            assert sorted(present) == seen, "chunk bitmap differs from the records present"
        return out


def model_clean(
    model: Model, p: tuple[uuid.UUID, int], work: PartitionWork, max_keys: int, now_ms: int
) -> None:
    """Kafka's cleaner on the model: buildOffsetMap then shouldRetainRecord, KIP-534."""
    live = model.live[p]
    fd, ce = work.first_dirty_offset, max(work.cleanable_end_offset, work.first_dirty_offset)
    m: dict[bytes, int] = {}
    covered_end = ce
    for off in sorted(live):
        r = live[off]
        if fd <= off < ce and r.key is not None:
            if len(m) >= max_keys:
                covered_end = off
                break
            m[r.key] = off
    horizons = model.horizon[p]
    for off in sorted(live):
        r = live[off]
        if off >= covered_end:
            continue
        shadowed = r.key is None or m.get(r.key, -1) > off
        expired = r.value is None and off in horizons and now_ms >= horizons[off]
        if shadowed or expired:
            del live[off]
    model.first_dirty[p] = covered_end


@pytest.fixture
def store():
    name = f"dedup-{uuid.uuid4().hex}"
    yield MemoryStore(name)
    drop_memory_bucket(name)


def _check(world: World, model: Model, now_ms: int) -> None:
    for p in world.partitions:
        got = world.read_partition(p)
        offsets = [g[0] for g in got]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        assert offsets == sorted(model.live[p]), f"partition {p}: offsets differ from Kafka's cleaner"
        for off, key, value, horizon in got:
            r = model.live[p][off]
            assert (key, value) == (r.key, r.value)
            if value is None and horizon is not None:
                model.horizon[p].setdefault(off, horizon)
                assert model.horizon[p][off] == horizon


@pytest.mark.parametrize("seed", range(12))
def test_randomised_rounds_match_kafkas_cleaner(store: MemoryStore, seed: int) -> None:
    rng = random.Random(seed)
    model = Model()
    parts = [(COMPACT, 0), (COMPACT, 1), (DELETE, 0)]
    world = World(store, model, parts)
    small_map = seed % 3 == 0
    kmap = KeyMap(SLOT_BYTES * 16, load_factor=0.5) if small_map else KeyMap(SLOT_BYTES * 4096)
    now = 1_000_000
    for round_no in range(6):
        for _ in range(rng.randint(1, 4)):  # several writers
            world.produce(rng, now, keys=rng.choice([3, 10, 40]), tombstone_rate=0.2)
        plan = world.plan(now, f"job{round_no}", lag=rng.choice([0, 0, 3]))
        before = store.stats.snapshot()
        for w in plan.partitions:
            if w.compact:
                model_clean(model, (w.topic_id, w.partition), w, kmap.max_keys, now)
        result = run_job(plan, store, world.swap, keymap=kmap, roll_bytes=rng.choice([600, 1 << 20]))
        used = store.stats.snapshot() - before
        # two streaming GETs per input file with compacted data, one for delete-only files,
        # and no other read request at all
        assert set(used.requests) <= {"stream_get", "put"}
        compacted_files = {f.object_key for f in plan.files if any(c.topic_id == COMPACT for c in f.chunks)}
        for f in plan.files:
            assert result.stats.gets_per_input_file[f.object_key] == (
                2 if f.object_key in compacted_files else 1
            )
        assert used.requests.get("stream_get", 0) == sum(result.stats.gets_per_input_file.values())
        for c in result.checkpoints:
            assert model.first_dirty[(c.topic_id, c.partition)] == c.first_dirty_offset
        _check(world, model, now)
        now += rng.choice([10, 600, 2_000])


def test_batches_keep_offsets_holes_and_untouched_bytes(store: MemoryStore) -> None:
    model = Model()
    world = World(store, model, [(COMPACT, 0)])
    p = (COMPACT, 0)
    # batch 0: a, b, c   batch 1: a, d   -> b, c kept in place, a's first record is a hole
    recs0 = [Record(0, 10, b"a", b"1", ()), Record(1, 11, b"b", b"2", ()), Record(2, 12, b"c", b"3", ())]
    recs1 = [Record(0, 13, b"a", b"4", ()), Record(1, 14, b"d", b"5", ())]
    batches = [
        build_batch(recs0, producer_id=7, producer_epoch=1, base_sequence=0),
        build_batch(recs1, producer_id=7, producer_epoch=1, base_sequence=3),
    ]
    data, pl = build_segment([ChunkInput(COMPACT, 0, batches, 2, 5)])
    store.put("agent/1", data)
    world.file_sizes["agent/1"] = len(data)
    world.chunks[1] = InputChunk(
        COMPACT, 0, ChunkLocation(1, "agent/1", pl[0].data_position, pl[0].byte_length, 0, 4, 5, 14)
    )
    model.next_offset[p] = 5
    run_job(world.plan(100, "j"), store, world.swap)
    (loc,) = [c.location for c in world.chunks.values()]
    out = store.get_range(loc.object_key, loc.byte_position, loc.byte_length)
    got = list(iter_chunk_batches(loc, out))
    assert [(b.base_offset, b.last_offset) for b in got] == [(0, 2), (3, 4)]
    first = got[0].header
    assert first.records_count == 2 and first.last_offset_delta == 2  # the hole at offset 0
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (7, 1, 0)
    assert [r.offset_delta for r in decode_records(out, got[0].position)] == [1, 2]
    validate_batch(out, got[0].position)
    # the second batch survives whole: byte for byte, base offset written
    second = bytes(out[got[1].position : got[1].position + got[1].size])
    assert second[8:] == batches[1][8:]
    assert loc.record_count == 4 and sorted(bitmaps.present_set(loc)) == [1, 2, 3, 4]


def test_tombstone_gets_a_horizon_then_goes_and_producer_last_batch_stays_empty(store: MemoryStore) -> None:
    model = Model()
    world = World(store, model, [(COMPACT, 0)])
    p = (COMPACT, 0)
    b0 = build_batch([Record(0, 10, b"a", b"1", ())], producer_id=9, producer_epoch=0, base_sequence=0)
    b1 = build_batch([Record(0, 20, b"a", None, ())], producer_id=9, producer_epoch=0, base_sequence=1)
    data, pl = build_segment([ChunkInput(COMPACT, 0, [b0, b1], 2, 2)])
    store.put("agent/1", data)
    world.file_sizes["agent/1"] = len(data)
    world.chunks[1] = InputChunk(
        COMPACT, 0, ChunkLocation(1, "agent/1", pl[0].data_position, pl[0].byte_length, 0, 1, 2, 20)
    )
    model.next_offset[p] = 2
    run_job(world.plan(5_000, "j1"), store, world.swap)
    got = world.read_partition(p)
    assert got == [(1, b"a", None, 5_000 + DRT_MS)]  # the first clean keeps it and sets the horizon
    (loc,) = [c.location for c in world.chunks.values()]
    out = store.get_range(loc.object_key, loc.byte_position, loc.byte_length)
    (b,) = list(iter_chunk_batches(loc, out))
    assert [r.timestamp for r in decode_records(out, b.position)] == [20]  # timestamps unchanged
    run_job(world.plan(5_000 + DRT_MS - 1, "j2"), store, world.swap)
    assert world.read_partition(p) == [(1, b"a", None, 5_000 + DRT_MS)]  # still inside the horizon
    run_job(world.plan(5_000 + DRT_MS, "j3"), store, world.swap)
    # past the horizon the tombstone goes; the batch was producer 9's last: kept empty
    assert world.read_partition(p) == []
    (loc,) = [c.location for c in world.chunks.values()]
    out = store.get_range(loc.object_key, loc.byte_position, loc.byte_length)
    (b,) = list(iter_chunk_batches(loc, out))
    assert (b.base_offset, b.header.records_count, b.header.producer_id, b.header.base_sequence) == (
        1,
        0,
        9,
        1,
    )
    assert loc.record_count == 0


def test_stream_reads_whole_outputs(store: MemoryStore) -> None:
    model = Model()
    world = World(store, model, [(COMPACT, 0), (DELETE, 0)])
    rng = random.Random(5)
    for _ in range(3):
        world.produce(rng, 1000, keys=5, tombstone_rate=0.0)
    result = run_job(world.plan(1000, "j"), store, world.swap, roll_bytes=1 << 20)
    assert len(result.output_keys) == 2  # compacted and delete-policy data in separate files
    for key in result.output_keys:
        chunks = list(iter_chunks_stream(iter([store.get(key)]), key))
        assert len({(h.topic_id, h.partition) for h, _ in chunks}) == 1


@pytest.mark.parametrize("seed", [1, 3])
def test_one_batch_per_column_group_gives_the_same_clean(
    store: MemoryStore, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks scanned in groups of one batch (the map can fill between groups) still match
    Kafka's cleaner: the grouping bounds memory, it must not change the answer."""
    import skiff.compactor.dedup as dedup

    monkeypatch.setattr(dedup, "SCAN_GROUP_BYTES", 1)
    test_randomised_rounds_match_kafkas_cleaner(store, seed)
