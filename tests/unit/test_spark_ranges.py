"""spark.ranges against the arithmetic of Spark's KafkaOffsetRangeCalculator."""

from __future__ import annotations

from skiff.spark.ranges import OffsetRange, split_ranges


def _r(p: int, a: int, b: int) -> OffsetRange:
    return OffsetRange("t", p, a, b)


def test_no_options_one_task_per_non_empty_partition() -> None:
    ranges = [_r(0, 0, 10), _r(1, 5, 5), _r(2, 3, 4)]
    assert split_ranges(ranges, min_partitions=None, max_records_per_partition=None) == [
        _r(0, 0, 10),
        _r(2, 3, 4),
    ]


def test_min_partitions_splits_large_ranges_in_proportion() -> None:
    # sizes 1000 and 10, minPartitions 4: the small one stays whole (round(10/1010*4) = 0 -> 1),
    # the large one takes the other 3 parts: 333, 333, 334
    got = split_ranges([_r(0, 0, 1000), _r(1, 0, 10)], min_partitions=4, max_records_per_partition=None)
    assert got == [_r(0, 0, 333), _r(0, 333, 666), _r(0, 666, 1000), _r(1, 0, 10)]


def test_enough_partitions_means_no_split() -> None:
    ranges = [_r(0, 0, 100), _r(1, 0, 100)]
    assert split_ranges(ranges, min_partitions=2, max_records_per_partition=None) == ranges


def test_max_records_per_partition_caps_every_task() -> None:
    got = split_ranges([_r(0, 10, 110)], min_partitions=None, max_records_per_partition=30)
    assert got == [_r(0, 10, 35), _r(0, 35, 60), _r(0, 60, 85), _r(0, 85, 110)]
    assert all(r.size <= 30 for r in got)


def test_max_records_then_min_partitions() -> None:
    got = split_ranges([_r(0, 0, 100)], min_partitions=4, max_records_per_partition=60)
    assert [r.size for r in got] == [25, 25, 25, 25]
