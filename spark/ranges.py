"""Splitting offset ranges into Spark tasks, as Spark's KafkaOffsetRangeCalculator does.

Empty ranges are dropped. Without `minPartitions` and `maxRecordsPerPartition`, one task
per partition range. With `maxRecordsPerPartition`, each range is first cut into
ceil(size / max) parts. Then, if `minPartitions` exceeds the number of ranges, ranges are
split in proportion to their size: a range whose share of `minPartitions`
(round(size / total * minPartitions)) is 1 stays whole; the others share the remaining
`minPartitions - unsplit` parts in proportion to their sizes. A range cut into `parts`
gives part i `remaining / (parts - i)` offsets (integer division), so the last parts take
the rounding. Sizes are offset counts: compaction holes make them estimates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    from_offset: int
    until_offset: int  # exclusive

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    remaining = r.size
    start = r.from_offset
    out = []
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        end = min(start + this, r.until_offset)
        out.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return [o for o in out if o.size > 0]


def _part_count(size: int, total: int, min_parts: int) -> int:
    # Scala's math.round rounds halves up; Python's round() would round them to even.
    return max(math.floor(size / total * min_parts + 0.5), 1)


def split_ranges(
    ranges: list[OffsetRange], *, min_partitions: int | None, max_records_per_partition: int | None
) -> list[OffsetRange]:
    ranges = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        ranges = [
            piece for r in ranges for piece in _divide(r, math.ceil(r.size / max_records_per_partition))
        ]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    unsplit = [i for i, r in enumerate(ranges) if _part_count(r.size, total, min_partitions) == 1]
    unsplit_set = set(unsplit)
    split_total = total - sum(ranges[i].size for i in unsplit)
    split_min = max(min_partitions - len(unsplit), 1)
    out: list[OffsetRange] = []
    for i, r in enumerate(ranges):
        parts = 1 if i in unsplit_set else _part_count(r.size, split_total, split_min)
        out.extend(_divide(r, parts))
    return out
