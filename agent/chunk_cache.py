"""A cache of chunk locations per partition, so most fetches need no metadata round trip.

What is cached is safe to reuse: a chunk location maps a committed offset range to
immutable bytes, and a file stays readable for a grace period even after compaction
replaces its chunks (invariant 3). Entries still expire after `ttl_ms` (well below the
garbage-collection grace period), so compaction's new layout is picked up.

Per partition the cache keeps the locations it has seen, sorted and non-overlapping,
plus the last known (log start, high watermark). A lookup is answered only when the
cache can answer exactly what metadata would: the fetch offset lies in
[log start, known high watermark) and the cached chunks run contiguously from the chunk
holding it until `max_bytes` is covered or the known high watermark is reached. A fetch
at or past the known high watermark (a consumer at the tail) goes to metadata unless the
watermark was confirmed recently or the commit watch follows the partition (then news
of a later commit will wake the waiting fetch): the cache never hides new data for long.

The cache learns from every metadata answer and from this agent's own commits
(`add_committed`), so consumers tailing a partition written through this agent are
usually served from memory and from the block cache, with no round trip at all.

read_committed (`lookup_committed`, `known_tail_committed`): each entry also keeps the
newest last stable offset (LSO) it has heard of, the high watermark it was current at
(`lso_hwm`), and the aborted transactions (producer id, first offset, last offset) that
overlap one offset span [ab_lo, ab_hi), complete for that span. All three are safe to
keep: the LSO never moves back, and whatever lies below it is decided for good (a later
transaction starts at or above the high watermark of its time, so no aborted range below
a known LSO can appear later). They are learnt from metadata's read_committed answers
(`aborted_ranges` up to `aborted_until`), from the commit watch's long-poll answers
(`saw_stable`: the LSO at a new high watermark) and from this agent's own commits: a
commit of plain (non-transactional, non-control) batches right at the known tail of a
partition whose LSO was the high watermark moves the LSO, and the span with no aborted
ranges, to the new high watermark; one without markers keeps an LSO held by an open
transaction where it is (now true at the new watermark). A fetch below the LSO whose
chunks are cached and whose span [offset, min(LSO, end of chunks)) lies inside
[ab_lo, ab_hi) is answered from memory (records are cut at the LSO by the caller); a
fetch at the LSO waits like one at the tail when the LSO is known for a high watermark
that is confirmed current (recently, or by the commit watch following the partition).
Bounds: at most `max_aborted_per_partition` ranges per partition (past it the span is
forgotten and fetches ask metadata) and `max_aborted_total` in the whole cache.

Ownership: no entry is owned by rule. Each agent learns what it serves, and routing
(agent.agent_registry) sends the clients of each zone to that zone's leader of a partition,
so this cache and the range cache of bytes are warm for a partition on one agent per zone
(its in-zone leader), and no agent caches for another zone's clients.
"""

from __future__ import annotations

import bisect
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from skiff.metadata.types import MAX_CACHEABLE_ABORTED, ChunkLocation, PartitionFetchInfo

Key = tuple[uuid.UUID, int]


@dataclass
class _Entry:
    stamp: float
    log_start: int
    hwm: int
    tail_stamp: float  # when `hwm` was last confirmed (metadata answer or own commit)
    chunks: list[ChunkLocation] = field(default_factory=list)  # sorted by base_offset
    bases: list[int] = field(default_factory=list)
    lso: int = -1  # newest last stable offset heard of (-1: unknown)
    lso_hwm: int = -1  # the high watermark at which `lso` was the LSO
    ab_lo: int = -1  # aborted ranges known completely for [ab_lo, ab_hi) (-1: no span known)
    ab_hi: int = -1
    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, first, last)


class ChunkLocationCache:
    def __init__(
        self,
        *,
        ttl_ms: int = 30_000,
        max_partitions: int = 50_000,
        max_chunks_per_partition: int = 1_000,
        max_aborted_per_partition: int = 2 * MAX_CACHEABLE_ABORTED,
        max_aborted_total: int = 100_000,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl_s = ttl_ms / 1000.0
        self._max_partitions = max_partitions
        self._max_chunks = max_chunks_per_partition
        self._max_aborted = max_aborted_per_partition
        self._max_aborted_total = max_aborted_total
        self.aborted_total = 0  # aborted ranges held, over all partitions
        self._now = monotonic
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def lookup(self, key: Key, offset: int, max_bytes: int) -> PartitionFetchInfo | None:
        entry = self._live(key)
        found = None if entry is None else self._chunks_at(entry, offset, max_bytes, entry.hwm)
        if entry is None or found is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return PartitionFetchInfo(0, entry.log_start, entry.hwm, found)

    def lookup_committed(self, key: Key, offset: int, max_bytes: int) -> PartitionFetchInfo | None:
        """A read_committed answer from memory: the chunks from `offset` (below the known
        LSO) up to `max_bytes` or the LSO, the LSO, and the aborted transactions
        overlapping what they hold; None when any of it is not known here."""
        entry = self._live(key)
        found = None if entry is None else self._chunks_at(entry, offset, max_bytes, entry.lso)
        if entry is None or found is None:
            self.misses += 1
            return None
        upper = min(entry.lso, found[-1].last_offset + 1)
        if not entry.ab_lo <= offset < upper <= entry.ab_hi:
            self.misses += 1
            return None
        aborted = tuple(
            (pid, first) for pid, first, last in entry.aborted if last >= offset and first < upper
        )
        self._entries.move_to_end(key)
        self.hits += 1
        return PartitionFetchInfo(0, entry.log_start, entry.hwm, found, entry.lso, aborted)

    def _live(self, key: Key) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is None or self._now() - entry.stamp > self._ttl_s:
            return None
        return entry

    def _chunks_at(
        self, entry: _Entry, offset: int, max_bytes: int, end: int
    ) -> tuple[ChunkLocation, ...] | None:
        """The cached chunks from the one holding `offset`, contiguous until `max_bytes`
        or `end` is reached; None if `offset` is outside [log start, end) or there is a gap."""
        if not entry.log_start <= offset < end:
            return None
        i = bisect.bisect_right(entry.bases, offset) - 1
        if i < 0 or entry.chunks[i].last_offset < offset:
            return None
        out = [entry.chunks[i]]
        total = entry.chunks[i].byte_length
        while total < max_bytes and out[-1].last_offset + 1 < end:
            i += 1
            if i >= len(entry.chunks) or entry.chunks[i].base_offset != out[-1].last_offset + 1:
                return None  # a gap: metadata knows more than we do
            out.append(entry.chunks[i])
            total += entry.chunks[i].byte_length
        return tuple(out)

    def known_tail(
        self, key: Key, offset: int, max_age_ms: int, *, confirmed: bool = False
    ) -> PartitionFetchInfo | None:
        """An empty answer for a fetch exactly at the known high watermark, if that was
        confirmed within `max_age_ms`, or is `confirmed` by the caller (the commit watch
        follows the partition and will hear of any later commit): the consumer is at the
        tail and can go straight to waiting."""
        entry = self._entries.get(key)
        if entry is None or offset != entry.hwm:
            return None
        if not confirmed and self._now() - entry.tail_stamp > max_age_ms / 1000.0:
            return None
        return PartitionFetchInfo(0, entry.log_start, entry.hwm, ())

    def known_tail_committed(
        self, key: Key, offset: int, max_age_ms: int, *, confirms: Callable[[int], bool] | None = None
    ) -> PartitionFetchInfo | None:
        """An empty read_committed answer for a fetch exactly at the known LSO, if that LSO
        is the one of the known high watermark and that watermark was confirmed within
        `max_age_ms` or `confirms(high watermark)` says the commit watch follows it (then
        any commit, the one of the markers that moves the LSO included, wakes the fetch)."""
        entry = self._entries.get(key)
        if entry is None or offset != entry.lso:
            return None
        fresh = entry.lso_hwm == entry.hwm and self._now() - entry.tail_stamp <= max_age_ms / 1000.0
        if not fresh and not (
            confirms is not None and entry.hwm <= entry.lso_hwm and confirms(entry.lso_hwm)
        ):
            return None
        return PartitionFetchInfo(0, entry.log_start, entry.lso_hwm, (), entry.lso, (), (), entry.lso)

    def lso_at(self, key: Key, high_watermark: int) -> int | None:
        """The LSO when the partition's high watermark is `high_watermark`, if known."""
        entry = self._entries.get(key)
        if entry is None or entry.lso < 0 or entry.lso_hwm != high_watermark:
            return None
        return entry.lso

    def saw_stable(self, key: Key, high_watermark: int, last_stable_offset: int) -> None:
        """The commit watch heard that at `high_watermark` the LSO is `last_stable_offset`."""
        entry = self._entries.get(key)
        if entry is None or not 0 <= last_stable_offset <= high_watermark:
            return
        if last_stable_offset > entry.lso or (
            last_stable_offset == entry.lso and high_watermark > entry.lso_hwm
        ):
            entry.lso, entry.lso_hwm = last_stable_offset, high_watermark

    def saw_high_watermark(self, key: Key, high_watermark: int) -> None:
        """Someone (the commit watch) saw this watermark: if it is news, stop trusting the tail."""
        entry = self._entries.get(key)
        if entry is not None and high_watermark > entry.hwm:
            entry.tail_stamp = float("-inf")

    def store(self, key: Key, info: PartitionFetchInfo, fetch_offset: int = -1) -> None:
        """Learn from a metadata answer (errors drop what we knew); `fetch_offset` is the
        query's offset, where a read_committed answer's `aborted_ranges` start."""
        if info.error_code:
            self._drop(key)
            return
        entry = self._merge(key, info.log_start_offset, info.high_watermark, info.chunks, refresh=True)
        if info.last_stable_offset < 0:
            return
        lso, hwm = info.last_stable_offset, info.high_watermark
        if lso > entry.lso or (lso == entry.lso and hwm > entry.lso_hwm):
            entry.lso, entry.lso_hwm = lso, hwm
        if info.aborted_until >= 0 and 0 <= fetch_offset <= info.aborted_until:
            self._learn_aborted(key, entry, fetch_offset, info.aborted_until, info.aborted_ranges)

    def add_committed(
        self,
        key: Key,
        chunks: Sequence[ChunkLocation],
        high_watermark: int,
        *,
        plain: bool = False,
        markers: bool = True,
    ) -> None:
        """Learn from this agent's own commit: new chunks and the new high watermark.

        Only extends an entry that exists and ends exactly where the new chunks begin (so
        no other agent's commit can have slipped in between unseen); otherwise nothing is
        learnt and the next fetch asks metadata. `plain`: the commit held no transactional
        and no control batch, so if the LSO was the high watermark it still is. Without
        `markers` (no control batch) no transaction closed: an LSO held below the old high
        watermark by an open transaction stays where it is.
        """
        entry = self._entries.get(key)
        if entry is None or not chunks or chunks[0].base_offset != entry.hwm:
            if entry is not None and high_watermark > entry.hwm:
                # someone else's commit came first: what we know is stale at the tail
                self._drop(key)
            return
        stable = plain and entry.lso == entry.hwm == entry.lso_hwm
        held = not markers and entry.lso_hwm == entry.hwm and 0 <= entry.lso < entry.hwm
        old_hwm = entry.hwm
        entry = self._merge(key, entry.log_start, high_watermark, chunks, refresh=False)
        if entry.hwm != high_watermark:
            return
        if stable:
            entry.lso = entry.lso_hwm = high_watermark
        elif held:
            entry.lso_hwm = high_watermark
        if plain and entry.ab_hi == old_hwm and entry.lso >= high_watermark:
            # no marker in what was just added, and no transaction left open below it
            # (the LSO is past it): no aborted range overlaps it
            entry.ab_hi = high_watermark

    def invalidate(self, key: Key) -> None:
        self._drop(key)

    def _drop(self, key: Key) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.aborted_total -= len(entry.aborted)

    def _learn_aborted(
        self, key: Key, entry: _Entry, lo: int, hi: int, ranges: Sequence[tuple[int, int, int]]
    ) -> None:
        """Merge "these are all the aborted ranges overlapping [lo, hi)" into the entry."""
        if entry.ab_hi >= 0 and lo <= entry.ab_hi and entry.ab_lo <= hi:
            merged = {(r[0], r[1]): r for r in entry.aborted}  # both complete: the union is too
            merged.update(((r[0], r[1]), r) for r in ranges)
            new = sorted(merged.values(), key=lambda r: r[1])
            lo, hi = min(lo, entry.ab_lo), max(hi, entry.ab_hi)
        elif hi >= entry.ab_hi:  # disjoint: keep the newer span (consumers move forward)
            new = sorted(ranges, key=lambda r: r[1])
        else:
            return
        lo = max(lo, min(entry.log_start, hi))
        new = [r for r in new if r[2] >= lo]  # nothing below the log start is read again
        self.aborted_total -= len(entry.aborted)
        if len(new) > self._max_aborted or self.aborted_total + len(new) > self._max_aborted_total:
            entry.ab_lo = entry.ab_hi = -1  # too many to keep: fetches ask metadata
            entry.aborted = []
            return
        entry.ab_lo, entry.ab_hi, entry.aborted = lo, hi, new
        self.aborted_total += len(new)

    def _merge(
        self, key: Key, log_start: int, hwm: int, chunks: Sequence[ChunkLocation], *, refresh: bool
    ) -> _Entry:
        entry = self._entries.get(key)
        now = self._now()
        if entry is None or now - entry.stamp > self._ttl_s:
            self._drop(key)
            entry = _Entry(now, log_start, hwm, now)
            self._entries[key] = entry
        elif refresh:
            entry.stamp = now
        if hwm >= entry.hwm:
            entry.tail_stamp = now
        entry.log_start = max(entry.log_start, log_start)
        entry.hwm = max(entry.hwm, hwm)
        for c in chunks:
            i = bisect.bisect_left(entry.bases, c.base_offset)
            if i < len(entry.bases) and entry.bases[i] == c.base_offset:
                entry.chunks[i] = c  # the same range, maybe a newer layout
                continue
            # refuse anything overlapping what we hold: keep the cache's ranges disjoint
            if i > 0 and entry.chunks[i - 1].last_offset >= c.base_offset:
                continue
            if i < len(entry.chunks) and c.last_offset >= entry.chunks[i].base_offset:
                continue
            entry.bases.insert(i, c.base_offset)
            entry.chunks.insert(i, c)
        # drop chunks below the log start, and the oldest beyond the per-partition bound
        while entry.chunks and (
            entry.chunks[0].last_offset < entry.log_start or len(entry.chunks) > self._max_chunks
        ):
            entry.chunks.pop(0)
            entry.bases.pop(0)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_partitions:
            _, evicted = self._entries.popitem(last=False)
            self.aborted_total -= len(evicted.aborted)
        return entry
