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
each producer's last batch, data or marker (for RETAIN_EMPTY, see `compactor.rebuild`).

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

Both passes work a chunk at a time on columns (`compactor.record_scan`): the chunk's
keys are hashed together (`compactor.md5_vec`) and put in or looked up in the map as a
batch (`KeyMap.put_many`, `get_many`); pass 2 decides every record's fate as a boolean
column and rebuilds a batch that loses records from the kept records' bytes, selected
with one mask over the chunk.

Transactions (Kafka's `CleanedTransactionMetadata`, batch-level decisions only, so the
NumPy paths above stay as they are for every other batch):
- the plan never reaches the last stable offset (the cleanable end is capped there);
- a transactional data batch of an aborted transaction (producer id and offset within a
  `PartitionWork.aborted` range) never enters the key map and is dropped in pass 2 when
  it lies below the covered end (kept empty when it is its producer's last batch, as
  RETAIN_EMPTY does); committed transactional records are deduplicated like any other;
- control batches (COMMIT/ABORT markers) are never keyed. Pass 2 walks the log in
  order and notes each producer whose transaction it met a data batch of (aborted or
  not); its next marker closes that. A marker below the covered end whose transaction
  had a data batch in this pass is kept byte for byte; one with no batch of its
  transaction left (the last remnant) gets a delete horizon (`now +
  delete.retention.ms`, KIP-534, the batch rewritten as for tombstones) by the first
  clean that sees it so, and is removed by a clean at or past that horizon (kept empty
  when it is its producer's last batch; such an empty marker goes once it is not). So a marker outlives its transaction's data by
  at least one clean and `delete.retention.ms`: a consumer reading the log then still
  meets the marker of every transaction whose data it read.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from pyroaring import BitMap
from skiff.compactor.keymap import KeyMap
from skiff.compactor.md5_vec import md5_halves
from skiff.compactor.plan import PartitionWork
from skiff.compactor.rebuild import (
    empty_batch,
    rebuild_batch,
    rebuild_from_kept,
    records_payload,
    scan_records,
)
from skiff.compactor.record_scan import RecordColumns, scan_batches
from skiff.fileformat.batch_header import BatchHeader, parse_header, patch_base_offset
from skiff.fileformat.chunk_reader import ChunkBatch, ChunkLocation, iter_chunk_batches

BytesLike = bytes | bytearray | memoryview
SCAN_GROUP_BYTES = 8 * 1024 * 1024  # batches scanned as one set of columns (see `_groups`)


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
    aborted_batches_dropped: int = 0
    markers_dropped: int = 0


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


class AbortedIndex:
    """Which transactional batches belong to an aborted transaction: per producer id its
    aborted ranges [first offset, marker offset], sorted (a producer has one transaction
    open per partition at a time, so the ranges of one producer do not overlap)."""

    def __init__(self, aborted: Sequence[tuple[int, int, int]]) -> None:
        by_pid: dict[int, list[tuple[int, int]]] = {}
        for pid, first, last in aborted:
            by_pid.setdefault(pid, []).append((first, last))
        self._firsts = {pid: [f for f, _ in sorted(rs)] for pid, rs in by_pid.items()}
        self._lasts = {pid: [la for _, la in sorted(rs)] for pid, rs in by_pid.items()}

    def __bool__(self) -> bool:
        return bool(self._firsts)

    def holds(self, producer_id: int, offset: int) -> bool:
        firsts = self._firsts.get(producer_id)
        if firsts is None:
            return False
        i = bisect.bisect_right(firsts, offset) - 1
        return i >= 0 and offset <= self._lasts[producer_id][i]


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
        self.aborted = AbortedIndex(work.aborted)
        self._txn_met: set[int] = set()  # producers with a data batch of their open transaction met in pass 2

    def _is_aborted(self, h: BatchHeader, base: int) -> bool:
        return bool(self.aborted) and h.is_transactional and self.aborted.holds(h.producer_id, base)

    @property
    def checkpoint(self) -> int:
        """The new first dirty offset once this clean is swapped in."""
        return self.covered_end

    # ---------------------------------------------------------------- pass 1

    def feed_pass1(self, loc: ChunkLocation, data: BytesLike) -> None:
        fd = self.first_dirty
        end = self.cleanable_end
        producer_last = self.producer_last
        chosen: list[ChunkBatch] = []
        for cb in iter_chunk_batches(loc, data):
            h = cb.header
            if h.producer_id >= 0:
                producer_last[h.producer_id] = cb.last_offset
            if h.is_control or self.full or cb.last_offset < fd or cb.base_offset >= end:
                continue
            if self._is_aborted(h, cb.base_offset):
                continue  # aborted records never shadow anything
            chosen.append(cb)
        for group in _groups(chosen):
            if self.full:
                return
            self._pass1_columns(data, group)

    def _pass1_columns(self, data: BytesLike, chosen: list[ChunkBatch]) -> None:
        fd = self.first_dirty
        end = self.cleanable_end
        cols = scan_batches(data, chosen)
        offsets = _record_offsets(chosen, cols)
        # a record at or past the cleanable end ends its batch's part in pass 1
        past = offsets >= end
        if past.any():
            past = _from_first_in_batch(past, cols.batch_first)
        sel = np.flatnonzero(~past & (offsets >= fd) & (cols.key_len >= 0))
        if not sel.size:
            return
        lo, hi = md5_halves(cols.key_buf, cols.key_start[sel], cols.key_len[sel])
        accepted = self.map.put_many(lo, hi, offsets[sel])
        if accepted < sel.size:
            self.full = True
            self.covered_end = int(offsets[sel[accepted]])
        taken = sel[:accepted]
        tombs = taken[cols.tombstone[taken]]
        if tombs.size:
            self.tombstones.update((offsets[tombs] - fd).astype(np.uint32))

    def finish_pass1(self) -> None:
        self._latest = self.map.latest_offsets()
        self._latest_tombstones = self._latest & self.tombstones
        self._pass2 = True

    # ---------------------------------------------------------------- pass 2

    def clean_chunk(self, loc: ChunkLocation, data: BytesLike) -> Iterator[OutBatch]:
        """Pass 2 over one chunk: the batches that survive, in offset order. Batches are
        decided in runs of about SCAN_GROUP_BYTES and yielded run by run, so a large
        chunk is never held twice (its survivors as well as its input)."""
        if not self._pass2:
            raise RuntimeError("pass 2 before finish_pass1")
        stats = self.stats
        loc_present: BitMap | None = None
        loaded = False
        # the current run, in order: an OutBatch decided already, or an index into `scan`
        run: list[OutBatch | int] = []
        scan: list[ChunkBatch] = []
        run_bytes = 0
        for cb in iter_chunk_batches(loc, data):
            h = cb.header
            base = cb.base_offset
            last = cb.last_offset
            stats.records_in += h.records_count
            if h.is_control or (h.is_transactional and h.producer_id >= 0):
                if not loaded:
                    loc_present, loaded = location_present(loc), True
                decided = self._txn_batch(data, cb, h, loc_present, loc.base_offset)
            else:
                decided = False
            if decided is not False:
                if decided is not None:
                    run.append(decided)
            else:
                out = self._fast_path(data, cb.position, h.size, base, last, h.records_count, h.max_timestamp)
                if out is not None:
                    run.append(out)
                else:
                    run.append(len(scan))
                    scan.append(cb)
            run_bytes += h.size
            if run_bytes >= SCAN_GROUP_BYTES:
                yield from self._finish_run(data, run, scan)
                run, scan, run_bytes = [], [], 0
        yield from self._finish_run(data, run, scan)

    def _txn_batch(
        self, data: BytesLike, cb: ChunkBatch, h: BatchHeader, loc_present: BitMap | None, loc_base: int
    ) -> OutBatch | None | bool:
        """Pass 2's transactional decisions (see the module docstring): a control batch
        or an aborted data batch is decided here (its OutBatch, or None when dropped);
        False: a committed transactional data batch, cleaned like any other."""
        base, last, pid = cb.base_offset, cb.last_offset, h.producer_id
        stats = self.stats
        below = last < self.covered_end
        if not h.is_control:
            self._txn_met.add(pid)
            if not (below and self._is_aborted(h, base)):
                return False
            stats.aborted_batches_dropped += 1
            if self.producer_last.get(pid) == last:
                stats.batches_rebuilt += 1
                return OutBatch(empty_batch(h, base), base, last, BitMap(), 0, h.max_timestamp)
            stats.batches_dropped += 1
            return None
        met = pid in self._txn_met
        self._txn_met.discard(pid)
        if h.records_count == 0 and pid >= 0 and self.producer_last.get(pid) != last:
            stats.batches_dropped += 1  # an emptied marker (already cleaned) no longer its producer's last
            return None
        horizon = h.delete_horizon_ms
        if below and pid >= 0 and not met and h.records_count:  # all that is left of its transaction
            if horizon is not None and self.now_ms >= horizon:
                stats.markers_dropped += 1
                if self.producer_last.get(pid) == last:
                    stats.batches_rebuilt += 1
                    return OutBatch(empty_batch(h, base), base, last, BitMap(), 0, h.max_timestamp)
                stats.batches_dropped += 1
                return None
            if horizon is None:
                payload = records_payload(data, cb.position, h)
                records = scan_records(payload, h.records_count, cb.position)
                rebuilt = rebuild_batch(
                    h,
                    base,
                    payload,
                    records,
                    new_delete_horizon_ms=self.now_ms + self.work.delete_retention_ms,
                )
                stats.batches_rebuilt += 1
                return OutBatch(
                    rebuilt,
                    base,
                    last,
                    BitMap(r.offset_delta for r in records),
                    h.records_count,
                    parse_header(rebuilt).max_timestamp,
                )
        stats.batches_copied += 1
        return OutBatch(
            verbatim(data, cb.position, h.size, base),
            base,
            last,
            batch_present(loc_present, loc_base, base, last),
            h.records_count,
            h.max_timestamp,
        )

    def _finish_run(
        self, data: BytesLike, run: list[OutBatch | int], scan: list[ChunkBatch]
    ) -> Iterator[OutBatch]:
        decided = self._clean_batches(data, scan) if scan else []
        for item in run:
            out = decided[item] if isinstance(item, int) else item
            if out is not None:
                self.stats.records_out += out.record_count
                yield out

    def _fast_path(
        self, data: BytesLike, position: int, size: int, base: int, last: int, count: int, max_ts: int
    ) -> OutBatch | None:
        """A batch wholly in the covered dirty range whose records all survive and hold no
        tombstone: copied without decoding. None: decode it."""
        fd = self.first_dirty
        if base < fd or last >= self.covered_end or count == 0:
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

    def _keep_mask(
        self, batches: list[ChunkBatch], cols: RecordColumns, offsets: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """Which records Kafka's cleaner keeps (see the module docstring), and which of the
        removed ones are tombstones dropped past their batch's delete horizon."""
        fd = self.first_dirty
        past = offsets >= self.covered_end
        keyed = cols.key_len >= 0
        keep = past.copy()
        dirty = np.flatnonzero(keyed & ~past & (offsets >= fd))
        if dirty.size:
            keep[dirty] = _members(self._latest, offsets[dirty] - fd)
        prefix = np.flatnonzero(keyed & (offsets < fd))
        if prefix.size:
            if self.map.size == 0:
                keep[prefix] = True
            else:
                lo, hi = md5_halves(cols.key_buf, cols.key_start[prefix], cols.key_len[prefix])
                keep[prefix] = self.map.get_many(lo, hi) <= offsets[prefix]
        now = self.now_ms
        passed = np.array(
            [(hz := cb.header.delete_horizon_ms) is not None and now >= hz for cb in batches], np.bool_
        )
        dropped = keep & ~past & cols.tombstone & np.repeat(passed, np.diff(cols.batch_first))
        keep &= ~dropped
        return keep, dropped

    def _clean_batches(self, data: BytesLike, batches: list[ChunkBatch]) -> list[OutBatch | None]:
        """Pass 2 of batches that need decoding: each one's OutBatch, or None (dropped)."""
        cols = scan_batches(data, batches)
        offsets = _record_offsets(batches, cols)
        keep, dropped = self._keep_mask(batches, cols, offsets)
        bf = cols.batch_first
        nb = len(batches)
        per_batch = np.repeat(np.arange(nb), np.diff(bf))
        kept_n = np.bincount(per_batch, weights=keep, minlength=nb).astype(np.int64).tolist()
        # an empty batch (RETAIN_EMPTY before) stays only while it is its producer's last
        tomb_kept = np.bincount(per_batch, weights=keep & cols.tombstone, minlength=nb).tolist()
        dropped_n = np.bincount(per_batch, weights=dropped, minlength=nb).astype(np.int64).tolist()
        # the kept records' bytes of the whole run, selected by one byte mask
        lengths = cols.end - cols.start
        kept_bytes = cols.buf[: len(cols.payload)][np.repeat(keep, lengths)].tobytes()
        kept_end = np.cumsum(np.bincount(per_batch, weights=lengths * keep, minlength=nb)).astype(np.int64)
        stats = self.stats
        out: list[OutBatch | None] = []
        for i, cb in enumerate(batches):
            h = cb.header
            base = cb.base_offset
            last = cb.last_offset
            a, b = int(bf[i]), int(bf[i + 1])
            n_kept = kept_n[i]
            stats.tombstones_dropped += dropped_n[i]
            new_horizon = (
                self.now_ms + self.work.delete_retention_ms
                if tomb_kept[i] and h.delete_horizon_ms is None
                else None
            )
            if n_kept == 0:
                if h.producer_id >= 0 and self.producer_last.get(h.producer_id) == last:
                    stats.batches_rebuilt += 1
                    out.append(OutBatch(empty_batch(h, base), base, last, BitMap(), 0, h.max_timestamp))
                else:
                    stats.batches_dropped += 1
                    out.append(None)
                continue
            if n_kept == h.records_count and n_kept == b - a and new_horizon is None:
                stats.batches_copied += 1
                present = BitMap(cols.offset_delta[a:b].astype(np.uint32))
                out.append(
                    OutBatch(
                        verbatim(data, cb.position, h.size, base),
                        base,
                        last,
                        present,
                        n_kept,
                        h.max_timestamp,
                    )
                )
                continue
            sel = np.flatnonzero(keep[a:b]) + a
            if new_horizon is None:
                kb_start = int(kept_end[i - 1]) if i else 0
                max_delta = int(cols.timestamp_delta[sel].max())
                rebuilt = rebuild_from_kept(
                    h, base, kept_bytes[kb_start : int(kept_end[i])], n_kept, max_delta
                )
            else:
                payload = cols.payload[int(cols.start[a]) : int(cols.end[b - 1])]
                records = scan_records(payload, h.records_count, cb.position)
                kept = [records[j - a] for j in sel.tolist()]
                rebuilt = rebuild_batch(h, base, payload, kept, new_delete_horizon_ms=new_horizon)
            stats.batches_rebuilt += 1
            out.append(
                OutBatch(
                    rebuilt,
                    base,
                    last,
                    BitMap(cols.offset_delta[sel].astype(np.uint32)),
                    n_kept,
                    parse_header(rebuilt).max_timestamp,
                )
            )
        return out


def _groups(batches: list[ChunkBatch]) -> Iterator[list[ChunkBatch]]:
    """Runs of consecutive batches of at most SCAN_GROUP_BYTES (at least one batch each):
    what is scanned as one set of columns, so that their memory stays bounded however
    large the chunk (a compacted file's chunk can be hundreds of MiB)."""
    group: list[ChunkBatch] = []
    size = 0
    for cb in batches:
        if group and size + cb.header.size > SCAN_GROUP_BYTES:
            yield group
            group, size = [], 0
        group.append(cb)
        size += cb.header.size
    if group:
        yield group


def _record_offsets(batches: list[ChunkBatch], cols: RecordColumns) -> npt.NDArray[np.int64]:
    """Each record's absolute offset."""
    bases = np.fromiter((cb.base_offset for cb in batches), np.int64, len(batches))
    return np.repeat(bases, np.diff(cols.batch_first)) + cols.offset_delta


def _from_first_in_batch(
    flag: npt.NDArray[np.bool_], batch_first: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    """True from each batch's first flagged record to the batch's end."""
    seen = np.concatenate([[0], np.cumsum(flag)])
    before = seen[batch_first[:-1]]
    out: npt.NDArray[np.bool_] = (seen[1:] - np.repeat(before, np.diff(batch_first))) > 0
    return out


def _members(bitmap: BitMap, values: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """Which of `values` (>= 0) the bitmap holds."""
    lo, hi = int(values.min()), int(values.max())
    start = bitmap.rank(lo - 1) if lo > 0 else 0
    part = np.asarray(bitmap[start : bitmap.rank(hi)].to_array(), np.int64)
    if not part.size:
        return np.zeros(len(values), np.bool_)
    at = np.minimum(np.searchsorted(part, values), part.size - 1)
    held: npt.NDArray[np.bool_] = part[at] == values
    return held
