"""Filter pushdown for batch reads: Spark's pushed filters -> bounds that prune the plan.

Spark 4.x hands a Python data source's reader the filters of a query (`pushFilters`, on
when `spark.sql.python.filterPushdown.enabled` is true) as the AND of `EqualTo`,
`GreaterThan(OrEqual)`, `LessThan(OrEqual)`, `In`, ... on one column each. The ones on
`partition`, `offset` and `timestamp` become a `ScanBounds`:

- `partition`: the set of partitions a row can be in (EqualTo, In, comparisons);
- `offset`: an inclusive offset interval, which clamps each partition's offset range;
- `timestamp`: an inclusive interval in microseconds (Spark's precision). Chunk metadata
  carries each chunk's max timestamp and a lower bound of its timestamps (`min_timestamp`,
  the smallest record timestamp the produce path's validator walked; Kafka timestamps are
  not monotonic, so it is not the first record's). A chunk whose max is below the lower
  bound, or whose min is above the upper bound, holds no matching row and is left out of
  the plan. A chunk with no min (NULL: written before metadata kept it, or by the
  compactor) is never left out by an upper bound.

Pruning is per chunk, not per row: a kept chunk still yields rows outside the bounds.
So every filter is handed back to Spark as one it still has to evaluate, and the
answer is exactly a full scan's plus Spark's filter. A filter whose value is of an
unexpected type (a naive datetime, a null) is ignored for pruning.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from skiff.fileformat.chunk_reader import ChunkLocation
from skiff.spark.ranges import OffsetRange

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
MICROS = datetime.timedelta(microseconds=1)
MAX_IN_VALUES = 10_000  # a longer IN list is not used for pruning (bounded work)


@dataclass(frozen=True)
class ScanBounds:
    """What the pushed filters allow; None: unbounded. Offsets and the timestamp inclusive."""

    partitions: frozenset[int] | None = None
    partition_min: int | None = None
    partition_max: int | None = None
    offset_min: int | None = None
    offset_max: int | None = None
    timestamp_min_us: int | None = None
    timestamp_max_us: int | None = None

    @property
    def pruning(self) -> bool:
        return self != ScanBounds()


def _micros(value: Any) -> int | None:
    """A timezone-aware datetime as microseconds since the epoch; else None."""
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        return (value - EPOCH) // MICROS
    return None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _interval(kind: str, value: Any, convert: Any) -> tuple[int | None, int | None, set[int] | None]:
    """(inclusive min, inclusive max, allowed values) one filter allows; all None: unknown."""
    if kind == "In":
        if not isinstance(value, (list, tuple)) or not 0 < len(value) <= MAX_IN_VALUES:
            return None, None, None
        known = [convert(v) for v in value]
        if any(v is None for v in known):
            return None, None, None
        return min(known), max(known), set(known)
    v = convert(value)
    if v is None:
        return None, None, None
    return {
        "EqualTo": (v, v, {v}),
        "GreaterThan": (v + 1, None, None),
        "GreaterThanOrEqual": (v, None, None),
        "LessThan": (None, v - 1, None),
        "LessThanOrEqual": (None, v, None),
    }.get(kind, (None, None, None))


def _tighter(current: int | None, new: int | None, pick: Any) -> int | None:
    if new is None:
        return current
    return new if current is None else int(pick(current, new))


def bounds_of(filters: Iterable[Any]) -> ScanBounds:
    """The bounds the AND of `filters` (pyspark.sql.datasource.Filter objects) implies."""
    bounds = ScanBounds()
    for f in filters:
        column = getattr(f, "attribute", None)
        if not isinstance(column, tuple) or len(column) != 1:
            continue  # Not(...), nested fields: no pruning
        name, kind, value = column[0], type(f).__name__, getattr(f, "value", None)
        if name == "timestamp":
            lo, hi, _ = _interval(kind, value, _micros)
            bounds = replace(
                bounds,
                timestamp_min_us=_tighter(bounds.timestamp_min_us, lo, max),
                timestamp_max_us=_tighter(bounds.timestamp_max_us, hi, min),
            )
        elif name == "offset":
            lo, hi, _ = _interval(kind, value, _integer)
            bounds = replace(
                bounds,
                offset_min=_tighter(bounds.offset_min, lo, max),
                offset_max=_tighter(bounds.offset_max, hi, min),
            )
        elif name == "partition":
            bounds = _with_partitions(bounds, *_interval(kind, value, _integer))
    return bounds


def _with_partitions(
    bounds: ScanBounds, lo: int | None, hi: int | None, values: set[int] | None
) -> ScanBounds:
    allowed = bounds.partitions
    if values is not None:
        allowed = frozenset(values) if allowed is None else allowed & values
    return replace(
        bounds,
        partitions=allowed,
        partition_min=_tighter(bounds.partition_min, lo, max),
        partition_max=_tighter(bounds.partition_max, hi, min),
    )


def keeps_partition(bounds: ScanBounds, partition: int) -> bool:
    """Whether a row of `partition` can pass the pushed filters on `partition`."""
    if bounds.partitions is not None and partition not in bounds.partitions:
        return False
    if bounds.partition_min is not None and partition < bounds.partition_min:
        return False
    return bounds.partition_max is None or partition <= bounds.partition_max


def clamp_range(r: OffsetRange, bounds: ScanBounds) -> OffsetRange | None:
    """`r` cut to the offset bounds; None when nothing of it is left."""
    start = r.from_offset if bounds.offset_min is None else max(r.from_offset, bounds.offset_min)
    until = r.until_offset if bounds.offset_max is None else min(r.until_offset, bounds.offset_max + 1)
    if start >= until:
        return None
    return OffsetRange(r.topic, r.partition, start, until)


def chunk_may_match(chunk: ChunkLocation, bounds: ScanBounds) -> bool:
    """False when no record of `chunk` can be within the timestamp bounds (ms -> us: a record
    at t ms reads as t * 1000 us)."""
    if bounds.timestamp_min_us is not None and chunk.max_timestamp * 1000 < bounds.timestamp_min_us:
        return False
    hi = bounds.timestamp_max_us
    return hi is None or chunk.min_timestamp is None or chunk.min_timestamp * 1000 <= hi
