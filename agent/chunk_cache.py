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
"""

from __future__ import annotations

import bisect
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from metadata.types import ChunkLocation, PartitionFetchInfo

Key = tuple[uuid.UUID, int]


@dataclass
class _Entry:
    stamp: float
    log_start: int
    hwm: int
    tail_stamp: float  # when `hwm` was last confirmed (metadata answer or own commit)
    chunks: list[ChunkLocation] = field(default_factory=list)  # sorted by base_offset
    bases: list[int] = field(default_factory=list)


class ChunkLocationCache:
    def __init__(
        self,
        *,
        ttl_ms: int = 30_000,
        max_partitions: int = 50_000,
        max_chunks_per_partition: int = 1_000,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl_s = ttl_ms / 1000.0
        self._max_partitions = max_partitions
        self._max_chunks = max_chunks_per_partition
        self._now = monotonic
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def lookup(self, key: Key, offset: int, max_bytes: int) -> PartitionFetchInfo | None:
        entry = self._entries.get(key)
        if entry is None or self._now() - entry.stamp > self._ttl_s:
            self.misses += 1
            return None
        if not entry.log_start <= offset < entry.hwm:
            self.misses += 1
            return None
        i = bisect.bisect_right(entry.bases, offset) - 1
        if i < 0 or entry.chunks[i].last_offset < offset:
            self.misses += 1
            return None
        out = [entry.chunks[i]]
        total = entry.chunks[i].byte_length
        while total < max_bytes and out[-1].last_offset + 1 < entry.hwm:
            i += 1
            if i >= len(entry.chunks) or entry.chunks[i].base_offset != out[-1].last_offset + 1:
                self.misses += 1
                return None  # a gap: metadata knows more than we do
            out.append(entry.chunks[i])
            total += entry.chunks[i].byte_length
        self._entries.move_to_end(key)
        self.hits += 1
        return PartitionFetchInfo(0, entry.log_start, entry.hwm, tuple(out))

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

    def saw_high_watermark(self, key: Key, high_watermark: int) -> None:
        """Someone (the commit watch) saw this watermark: if it is news, stop trusting the tail."""
        entry = self._entries.get(key)
        if entry is not None and high_watermark > entry.hwm:
            entry.tail_stamp = float("-inf")

    def store(self, key: Key, info: PartitionFetchInfo) -> None:
        """Learn from a metadata answer (errors drop what we knew)."""
        if info.error_code:
            self._entries.pop(key, None)
            return
        self._merge(key, info.log_start_offset, info.high_watermark, info.chunks, refresh=True)

    def add_committed(self, key: Key, chunks: Sequence[ChunkLocation], high_watermark: int) -> None:
        """Learn from this agent's own commit: new chunks and the new high watermark.

        Only extends an entry that exists and ends exactly where the new chunks begin (so
        no other agent's commit can have slipped in between unseen); otherwise nothing is
        learnt and the next fetch asks metadata.
        """
        entry = self._entries.get(key)
        if entry is None or not chunks or chunks[0].base_offset != entry.hwm:
            if entry is not None and high_watermark > entry.hwm:
                # someone else's commit came first: what we know is stale at the tail
                self._entries.pop(key, None)
            return
        self._merge(key, entry.log_start, high_watermark, chunks, refresh=False)

    def invalidate(self, key: Key) -> None:
        self._entries.pop(key, None)

    def _merge(
        self, key: Key, log_start: int, hwm: int, chunks: Sequence[ChunkLocation], *, refresh: bool
    ) -> None:
        entry = self._entries.get(key)
        now = self._now()
        if entry is None or now - entry.stamp > self._ttl_s:
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
            self._entries.popitem(last=False)
