"""Kafka's cleaner rules (cleanableOffsets, dirty ratio, min/max compaction lag) and the
level merge rules, over chunk statistics, with an explicit clock."""

from __future__ import annotations

from skiff.metadata.compaction.rules import ChunkStat, cleanable_offsets, merge_start, needs_cleaning
from skiff.metadata.compaction.types import MergeRules

NOW = 1_000_000_000


def chunk(
    base: int, n: int, nbytes: int, ts: int = NOW - 10_000, level: int = 0, committed: int = 0
) -> ChunkStat:
    return ChunkStat(base, base + n - 1, nbytes, ts, level, committed)


def clean(
    chunks: list[ChunkStat], checkpoint: int | None, hwm: int, min_lag: int = 0, max_lag: int = 2**63 - 1
):
    return cleanable_offsets(
        chunks,
        checkpoint=checkpoint,
        log_start_offset=chunks[0].base_offset if chunks else 0,
        high_watermark=hwm,
        now_ms=NOW,
        min_compaction_lag_ms=min_lag,
        max_compaction_lag_ms=max_lag,
    )


LOG = [chunk(0, 10, 400), chunk(10, 10, 400), chunk(20, 10, 100), chunk(30, 10, 100)]


def test_ratio_above_the_minimum_cleans() -> None:
    c = clean(LOG, checkpoint=20, hwm=40)
    assert (c.first_dirty_offset, c.cleanable_end_offset) == (20, 40)
    assert (c.clean_bytes, c.cleanable_bytes) == (800, 200)
    assert c.dirty_ratio == 0.2
    assert not needs_cleaning(c, 0.5)  # 0.2 is not above 0.5
    assert needs_cleaning(c, 0.1)
    assert not needs_cleaning(c, 0.2)  # Kafka: strictly greater than min.cleanable.dirty.ratio


def test_never_cleaned_log_is_all_dirty() -> None:
    c = clean(LOG, checkpoint=None, hwm=40)
    assert (c.first_dirty_offset, c.clean_bytes, c.cleanable_bytes) == (0, 0, 1000)
    assert c.dirty_ratio == 1.0 and needs_cleaning(c, 0.5)


def test_invalid_checkpoints_reset_to_the_log_start() -> None:
    assert clean(LOG, checkpoint=99, hwm=40).first_dirty_offset == 0  # beyond the log end
    log = LOG[1:]
    c = cleanable_offsets(
        log,
        checkpoint=5,
        log_start_offset=10,
        high_watermark=40,
        now_ms=NOW,
        min_compaction_lag_ms=0,
        max_compaction_lag_ms=2**63 - 1,
    )
    assert c.first_dirty_offset == 10  # retention moved the log start past it


def test_checkpoint_inside_a_chunk_counts_that_chunk_dirty() -> None:
    c = clean(LOG, checkpoint=25, hwm=40)  # Kafka: from the segment holding the first dirty offset
    assert (c.clean_bytes, c.cleanable_bytes) == (800, 200)


def test_min_compaction_lag_holds_back_young_chunks() -> None:
    log = [
        chunk(0, 10, 100, ts=NOW - 60_000),
        chunk(10, 10, 100, ts=NOW - 20_000),
        chunk(20, 10, 100, ts=NOW - 50_000),
    ]
    c = clean(log, checkpoint=None, hwm=30, min_lag=30_000)
    # The first chunk whose largest timestamp is within the lag ends the cleanable range,
    # even though an older chunk follows it (Kafka: the first uncleanable segment).
    assert c.cleanable_end_offset == 10
    assert c.cleanable_bytes == 100
    assert clean(log, checkpoint=None, hwm=30, min_lag=10_000).cleanable_end_offset == 30
    nothing = clean(log, checkpoint=None, hwm=30, min_lag=120_000)
    assert nothing.cleanable_end_offset == 0 and not needs_cleaning(nothing, 0.0)


def test_max_compaction_lag_forces_a_clean_below_the_ratio() -> None:
    log = [chunk(0, 10, 1000, ts=NOW - 100_000), chunk(10, 10, 10, ts=NOW - 90_000)]
    below = clean(log, checkpoint=10, hwm=20)
    assert below.dirty_ratio < 0.5 and not needs_cleaning(below, 0.5)
    forced = clean(log, checkpoint=10, hwm=20, max_lag=60_000)
    assert forced.forced and needs_cleaning(forced, 0.5)
    not_yet = clean(log, checkpoint=10, hwm=20, max_lag=95_000)
    assert not not_yet.forced and not needs_cleaning(not_yet, 0.5)
    # No cleanable bytes (all dirty data too young for min lag): nothing is forced.
    held = clean(log, checkpoint=10, hwm=20, min_lag=95_000, max_lag=60_000)
    assert not needs_cleaning(held, 0.5)


def test_timestamps_without_value_do_not_force() -> None:
    log = [chunk(0, 10, 1000), chunk(10, 10, 10, ts=-1)]
    assert not clean(log, checkpoint=10, hwm=20, max_lag=1).forced


RULES = MergeRules(
    target_chunk_bytes=1000, min_level0_bytes=300, min_level0_chunks=4, max_level0_delay_ms=60_000
)


def test_merge_waits_for_bytes_count_or_age() -> None:
    young = [chunk(0, 1, 100, level=0, committed=NOW - 1000)]
    assert merge_start(young, NOW, RULES) is None
    assert merge_start(young * 1 + [chunk(1, 1, 250, level=0, committed=NOW)], NOW, RULES) == 0  # bytes
    many = [chunk(i, 1, 10, level=0, committed=NOW) for i in range(4)]
    assert merge_start(many, NOW, RULES) == 0  # count
    old = [chunk(0, 1, 10, level=0, committed=NOW - 60_000)]
    assert merge_start(old, NOW, RULES) == 0  # age
    assert merge_start([chunk(0, 1, 10, level=1)], NOW, RULES) is None  # nothing at level 0


def test_merge_takes_smaller_tail_chunks_like_a_binary_counter() -> None:
    def run(sizes: list[int], l0: int) -> int | None:
        log = [chunk(i, 1, n, level=1) for i, n in enumerate(sizes)]
        log.append(chunk(len(sizes), 1, l0, level=0, committed=NOW - 60_000))
        return merge_start(log, NOW, RULES)

    assert run([400, 100], 100) == 1  # 100 <= 100 taken; 400 > 200 stops
    assert run([400, 200, 100], 100) == 0  # 100, then 200 <= 200, then 400 <= 400
    assert run([900, 50], 60) == 1  # 900 would pass the 1000-byte target
    assert run([1000], 10) == 1  # full chunks stay


def test_chunk_rows_grow_with_bytes_not_time() -> None:
    """Simulate a slow partition: one small level-0 chunk per merge round. The number of
    chunk rows stays about bytes/target + log2(target/chunk), however many rounds pass."""
    sizes: list[int] = []
    for _ in range(2000):
        log = [chunk(i, 1, n, level=1) for i, n in enumerate(sizes)]
        log.append(chunk(len(sizes), 1, 10, level=0, committed=NOW - 60_000))
        start = merge_start(log, NOW, RULES)
        assert start is not None
        sizes = sizes[:start] + [sum(c.byte_length for c in log[start:])]
    assert sum(sizes) == 20_000
    assert len(sizes) <= 20_000 // 1000 * 2 + 8  # not 2000 rows
