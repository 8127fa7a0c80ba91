"""The pure two-pass dedup of one compacted partition (Kafka's cleaner, no I/O here).

`compactor.job` feeds each chunk of the partition twice, in offset order: once to pass 1
(from stream A), then, after `finish_pass1`, once to pass 2 (from stream B), which
returns the surviving batches. Chunks are `(ChunkLocation, bytes)`; agent chunks carry
relative offsets and `fileformat.chunk_reader.iter_chunk_batches` assigns the absolute
ones.

Pass 1 (Kafka's `buildOffsetMap`): for every keyed record of a data batch at an offset in
`[first_dirty_offset, cleanable_end_offset)`, `key map[MD5(key)] = offset`; tombstone
offsets are noted in a bitmap. When the map is full (`compactor.keymap`) the pass stops
at that record: the covered range is `[first_dirty, stop offset)` and the stop offset is
the new checkpoint; otherwise the checkpoint is `cleanable_end_offset`. Pass 1 also notes
each producer's last data batch (for RETAIN_EMPTY, see `compactor.rebuild`).

Pass 2 (Kafka's `shouldRetainRecord`), for each record at offset `o`:
- `o` at or past the covered end: kept (Kafka's `pastLatestOffset`), tombstones too;
- keyless: removed (as Kafka's cleaner does; produce refuses them on compacted topics);
- `o` in the covered dirty range: kept iff `o` is its key's latest offset, i.e. iff `o`
  is one of the map's values. The values form a roaring bitmap `S` once pass 1 is done,
  so this range needs no hashing and a batch whose records are all in `S` is copied
  without being decoded;
- `o` below the first dirty offset (the clean prefix, which pass 2 also covers because
  newer keys shadow older records there): kept iff the key is not in the map (its
  offsets there are all newer);
- a kept tombstone whose batch's delete horizon has passed (`now >= horizon`) is
  removed; a kept tombstone in a batch without a horizon makes the batch get one
  (`now + delete.retention.ms`, KIP-534).

Control batches (transaction markers) are kept byte for byte: Skiff refuses
transactional produce, so none occur; Kafka would drop a marker whose transaction has no
data left once past its delete horizon.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pyroaring import BitMap

from compactor.keymap import KeyMap, md5
from compactor.plan import PartitionWork
from compactor.rebuild import empty_batch, rebuild_batch, records_payload, scan_records
from fileformat.chunk_reader import ChunkBatch, ChunkLocation, iter_chunk_batches
from fileformat.records import parse_header, patch_base_offset

BytesLike = bytes | bytearray | memoryview


@dataclass
class OutBatch:
    """A batch that survives, with its absolute base offset written in."""

    data: bytes
    base_offset: int
    last_offset: int
    present: BitMap  # offsets of its records, relative to base_offset
    record_count: int
    max_timestamp: int


@dataclass
class CleanStats:
    records_in: int = 0
    records_out: int = 0
    tombstones_dropped: int = 0
    batches_copied: int = 0
    batches_rebuilt: int = 0
    batches_dropped: int = 0


def location_present(loc: ChunkLocation) -> BitMap | None:
    """The chunk's present offsets relative to its base offset (None: all present)."""
    return None if loc.present_offsets is None else BitMap.deserialize(loc.present_offsets)


def batch_present(loc_present: BitMap | None, loc_base: int, base: int, last: int) -> BitMap:
    """Offsets of a batch's records, relative to the batch's base offset."""
    out = BitMap()
    if loc_present is None:
        out.add_range(0, last - base + 1)
        return out
    lo = base - loc_base
    start = loc_present.rank(lo - 1) if lo > 0 else 0
    end = loc_present.rank(last - loc_base)
    part = loc_present[start:end]
    return part.shift(-lo) if lo else part


def verbatim(data: BytesLike, position: int, size: int, base_offset: int) -> bytes:
    """A batch's bytes with its absolute base offset written (outside the CRC)."""
    out = bytearray(data[position : position + size])
    patch_base_offset(out, 0, base_offset)
    return bytes(out)


class PartitionCleaner:
    """Pass 1 and pass 2 of one compacted partition (see the module docstring)."""

    def __init__(self, work: PartitionWork, keymap: KeyMap, now_ms: int) -> None:
        self.work = work
        self.now_ms = now_ms
        self.first_dirty = work.first_dirty_offset
        self.cleanable_end = max(work.cleanable_end_offset, work.first_dirty_offset)
        self.map = keymap
        keymap.reset(self.first_dirty)
        self.tombstones = BitMap()  # dirty tombstone offsets, relative to first_dirty
        self.producer_last: dict[int, int] = {}  # producer id -> last offset of its last data batch
        self.full = False
        self.covered_end = self.cleanable_end  # becomes the stop offset when the map fills
        self.stats = CleanStats()
        self._latest = BitMap()
        self._latest_tombstones = BitMap()
        self._pass2 = False

    @property
    def checkpoint(self) -> int:
        """The new first dirty offset once this clean is swapped in."""
        return self.covered_end

    # ---------------------------------------------------------------- pass 1

    def feed_pass1(self, loc: ChunkLocation, data: BytesLike) -> None:
        fd = self.first_dirty
        end = self.cleanable_end
        put = self.map.put
        producer_last = self.producer_last
        for cb in iter_chunk_batches(loc, data):
            h = cb.header
            if h.is_control:
                continue
            if h.producer_id >= 0:
                producer_last[h.producer_id] = cb.last_offset
            base = cb.base_offset
            if self.full or cb.last_offset < fd or base >= end:
                continue
            payload = records_payload(data, cb.position, h)
            for r in scan_records(payload, h.records_count, cb.position):
                offset = base + r.offset_delta
                if offset < fd or r.key is None:
                    continue
                if offset >= end:
                    break
                if not put(md5(r.key).digest(), offset):
                    self.full = True
                    self.covered_end = offset
                    break
                if r.tombstone:
                    self.tombstones.add(offset - fd)

    def finish_pass1(self) -> None:
        self._latest = self.map.latest_offsets()
        self._latest_tombstones = self._latest & self.tombstones
        self._pass2 = True

    # ---------------------------------------------------------------- pass 2

    def clean_chunk(self, loc: ChunkLocation, data: BytesLike) -> Iterator[OutBatch]:
        """Pass 2 over one chunk: the batches that survive, in offset order."""
        if not self._pass2:
            raise RuntimeError("pass 2 before finish_pass1")
        loc_present: BitMap | None = None
        loaded = False
        stats = self.stats
        for cb in iter_chunk_batches(loc, data):
            h = cb.header
            base = cb.base_offset
            last = cb.last_offset
            stats.records_in += h.records_count
            if h.is_control:
                if not loaded:
                    loc_present, loaded = location_present(loc), True
                stats.batches_copied += 1
                stats.records_out += h.records_count
                yield OutBatch(
                    verbatim(data, cb.position, h.size, base),
                    base,
                    last,
                    batch_present(loc_present, loc.base_offset, base, last),
                    h.records_count,
                    h.max_timestamp,
                )
                continue
            out = self._fast_path(data, cb.position, h.size, base, last, h.records_count, h.max_timestamp)
            if out is None:
                out = self._slow_path(data, cb)
            if out is not None:
                stats.records_out += out.record_count
                yield out

    def _fast_path(
        self, data: BytesLike, position: int, size: int, base: int, last: int, count: int, max_ts: int
    ) -> OutBatch | None:
        """A batch wholly in the covered dirty range whose records all survive and hold no
        tombstone: copied without decoding. None: decode it."""
        fd = self.first_dirty
        if base < fd or last >= self.covered_end:
            return None
        lo, hi = base - fd, last - fd + 1
        if self._latest.range_cardinality(lo, hi) != count:
            return None
        if self._latest_tombstones and self._latest_tombstones.range_cardinality(lo, hi):
            return None
        start = self._latest.rank(lo - 1) if lo > 0 else 0
        present = self._latest[start : start + count].shift(-lo)
        self.stats.batches_copied += 1
        return OutBatch(verbatim(data, position, size, base), base, last, present, count, max_ts)

    def _slow_path(self, data: BytesLike, cb: ChunkBatch) -> OutBatch | None:
        """Decode the batch and keep what Kafka's cleaner keeps."""
        h = cb.header
        base = cb.base_offset
        fd = self.first_dirty
        covered_end = self.covered_end
        latest = self._latest
        get = self.map.get
        map_empty = self.map.size == 0
        horizon = h.delete_horizon_ms
        horizon_passed = horizon is not None and self.now_ms >= horizon
        payload = records_payload(data, cb.position, h)
        records = scan_records(payload, h.records_count, cb.position)
        kept = []
        tombstone_kept = False
        for r in records:
            offset = base + r.offset_delta
            if offset >= covered_end:
                kept.append(r)
                tombstone_kept = tombstone_kept or r.tombstone
                continue
            if r.key is None:
                continue
            if offset >= fd:
                if offset - fd not in latest:
                    continue
            elif not map_empty and get(md5(r.key).digest()) > offset:
                continue
            if r.tombstone:
                if horizon_passed:
                    self.stats.tombstones_dropped += 1
                    continue
                tombstone_kept = True
            kept.append(r)
        new_horizon = (
            self.now_ms + self.work.delete_retention_ms if tombstone_kept and horizon is None else None
        )
        last = cb.last_offset
        if len(kept) == len(records) and new_horizon is None:
            present = BitMap([r.offset_delta for r in kept])
            self.stats.batches_copied += 1
            return OutBatch(
                verbatim(data, cb.position, h.size, base), base, last, present, len(kept), h.max_timestamp
            )
        if not kept:
            if h.producer_id >= 0 and self.producer_last.get(h.producer_id) == last:
                self.stats.batches_rebuilt += 1
                return OutBatch(empty_batch(h, base), base, last, BitMap(), 0, h.max_timestamp)
            self.stats.batches_dropped += 1
            return None
        out = rebuild_batch(h, base, payload, kept, new_delete_horizon_ms=new_horizon)
        self.stats.batches_rebuilt += 1
        return OutBatch(
            out,
            base,
            last,
            BitMap([r.offset_delta for r in kept]),
            len(kept),
            parse_header(out).max_timestamp,
        )
