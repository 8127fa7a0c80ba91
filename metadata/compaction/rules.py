"""Which partitions need compaction work: Kafka's cleaner rules and the merge rules. Pure.

Kafka's log cleaner (LogCleanerManager.cleanableOffsets / grabFilthiestCompactedLog),
with chunk rows in place of segments (a chunk's `max_timestamp` is a segment's largest
timestamp; Skiff has no active segment, the high watermark ends the log):

- first dirty offset = the cleaner checkpoint, or the log start offset when there is
  none, when it is below the log start (retention moved past it) or above the high
  watermark (an invalid checkpoint);
- the cleanable end = the base offset of the first chunk at or after the first dirty
  offset whose largest timestamp is within `min.compaction.lag.ms` of now
  (`max_timestamp > now - lag`; only when the lag is > 0), else the high watermark; in
  every case at most the last stable offset (the first offset of the oldest open
  transaction: Kafka's firstUnstableOffset), so nothing at or above it is cleaned;
- clean bytes = the chunks below the chunk holding the first dirty offset; cleanable
  bytes = the chunks from that one up to the cleanable end; ratio = cleanable / total;
- a partition is cleanable when ratio > `min.cleanable.dirty.ratio`, or when the dirty
  data is older than `max.compaction.lag.ms` (its earliest timestamp < now - lag) and
  there are cleanable bytes. Kafka uses the first batch timestamp of each dirty
  segment; a chunk row keeps only its largest timestamp, so this uses that (an upper
  bound: a clean is forced no earlier than Kafka would force it). Timestamps <= 0
  (none) are ignored, as Kafka does.

Delete-policy partitions follow `metadata.compaction.types.MergeRules`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from skiff.metadata.compaction.types import MergeRules


@dataclass(frozen=True)
class ChunkStat:
    """What the rules need of one chunk row (a partition's chunks come in offset order)."""

    base_offset: int
    last_offset: int
    byte_length: int
    max_timestamp: int
    file_level: int
    committed_ms: int


@dataclass(frozen=True)
class Cleanable:
    first_dirty_offset: int
    cleanable_end_offset: int
    clean_bytes: int
    cleanable_bytes: int
    forced: bool
    dirty_chunks: int  # chunk rows in [first dirty chunk, cleanable end)

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


def first_dirty_offset(checkpoint: int | None, log_start_offset: int, high_watermark: int) -> int:
    if checkpoint is None or checkpoint < log_start_offset or checkpoint > high_watermark:
        return log_start_offset
    return checkpoint


def cleanable_offsets(
    chunks: Sequence[ChunkStat],
    *,
    checkpoint: int | None,
    log_start_offset: int,
    high_watermark: int,
    now_ms: int,
    min_compaction_lag_ms: int,
    max_compaction_lag_ms: int,
    last_stable_offset: int | None = None,
) -> Cleanable:
    """Kafka's cleanableOffsets and dirty-byte accounting over one partition's chunks.
    `last_stable_offset`: the first offset of the oldest open transaction (None: none
    open); the cleanable end never passes it (Kafka's firstUnstableOffset)."""
    first_dirty = first_dirty_offset(checkpoint, log_start_offset, high_watermark)
    min_lag = max(min_compaction_lag_ms, 0)
    end = high_watermark if last_stable_offset is None else min(high_watermark, last_stable_offset)
    clean_bytes = cleanable_bytes = dirty_chunks = 0
    earliest_dirty_ts: int | None = None
    for c in chunks:
        if c.last_offset < first_dirty:
            clean_bytes += c.byte_length
            continue
        if c.base_offset >= end:
            break
        if min_lag > 0 and c.max_timestamp > now_ms - min_lag:
            end = max(c.base_offset, first_dirty)  # nothing younger than the lag is cleaned
            break
        cleanable_bytes += c.byte_length
        dirty_chunks += 1
        if c.max_timestamp > 0 and (earliest_dirty_ts is None or c.max_timestamp < earliest_dirty_ts):
            earliest_dirty_ts = c.max_timestamp
    end = max(end, first_dirty)
    max_lag = max(max_compaction_lag_ms, 0)
    forced = (
        earliest_dirty_ts is not None
        and now_ms - max_lag > earliest_dirty_ts  # no overflow in Python; Kafka's default is Long.MAX
        and cleanable_bytes > 0
    )
    return Cleanable(first_dirty, end, clean_bytes, cleanable_bytes, forced, dirty_chunks)


def needs_cleaning(c: Cleanable, min_cleanable_dirty_ratio: float) -> bool:
    """grabFilthiestCompactedLog's filter: forced with cleanable bytes, or the ratio above the minimum."""
    if c.cleanable_end_offset <= c.first_dirty_offset or c.cleanable_bytes == 0:
        return False
    return c.forced or c.dirty_ratio > min_cleanable_dirty_ratio


def merge_start(chunks: Sequence[ChunkStat], now_ms: int, rules: MergeRules) -> int | None:
    """The index of the first chunk a merge of this delete-policy partition consumes (it
    consumes chunks[i:]), or None when the partition needs no merge now.

    Level-0 chunks form the partition's tail (agents append; a merge takes them all).
    Any compactor-written chunk among them (never expected) is taken too: a merge always
    consumes a contiguous run of offsets."""
    first_l0 = next((i for i, c in enumerate(chunks) if c.file_level == 0), None)
    if first_l0 is None:
        return None
    tail = chunks[first_l0:]
    l0_bytes = sum(c.byte_length for c in tail)
    l0_count = sum(1 for c in tail if c.file_level == 0)
    oldest_ms = min(c.committed_ms for c in tail if c.file_level == 0)
    if not (
        l0_bytes >= rules.min_level0_bytes
        or l0_count >= rules.min_level0_chunks
        or now_ms - oldest_ms >= rules.max_level0_delay_ms
    ):
        return None
    start, taken = first_l0, l0_bytes
    while start > 0:
        prev = chunks[start - 1]
        if prev.byte_length > taken or taken + prev.byte_length > rules.target_chunk_bytes:
            break
        start -= 1
        taken += prev.byte_length
    return start
