"""Chunk-location cache: answers only what metadata would answer, learns, expires."""

from __future__ import annotations

import uuid

from skiff.agent.chunk_cache import ChunkLocationCache
from skiff.metadata.types import ChunkLocation, PartitionFetchInfo

K = (uuid.UUID(int=3), 0)


def loc(base: int, last: int, size: int = 100, key: str = "f") -> ChunkLocation:
    return ChunkLocation(
        chunk_id=-1,
        object_key=f"{key}{base}",
        byte_position=16,
        byte_length=size,
        base_offset=base,
        last_offset=last,
        record_count=last - base + 1,
        max_timestamp=0,
    )


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_hit_needs_contiguous_chunks_up_to_budget_or_hwm() -> None:
    c = ChunkLocationCache(ttl_ms=1000, monotonic=Clock())
    c.store(K, PartitionFetchInfo(0, 0, 30, (loc(0, 9), loc(10, 19), loc(20, 29))))
    info = c.lookup(K, 12, 150)
    assert info is not None and [x.base_offset for x in info.chunks] == [10, 20]
    assert info.high_watermark == 30
    assert c.lookup(K, 25, 10_000) is not None  # reaches the hwm: complete
    assert c.lookup(K, 30, 100) is None  # at the tail: ask metadata
    assert c.lookup(K, -1, 100) is None  # below log start: metadata decides the error


def test_gap_is_a_miss() -> None:
    c = ChunkLocationCache(monotonic=Clock())
    c.store(K, PartitionFetchInfo(0, 0, 30, (loc(0, 9), loc(20, 29))))
    assert c.lookup(K, 5, 100) is not None  # the first chunk alone covers the budget
    assert c.lookup(K, 5, 1000) is None  # would need 10..19, unknown


def test_entries_expire() -> None:
    clock = Clock()
    c = ChunkLocationCache(ttl_ms=1000, monotonic=clock)
    c.store(K, PartitionFetchInfo(0, 0, 10, (loc(0, 9),)))
    clock.t = 2.0
    assert c.lookup(K, 0, 10) is None


def test_own_commit_extends_only_a_contiguous_tail() -> None:
    c = ChunkLocationCache(monotonic=Clock())
    c.store(K, PartitionFetchInfo(0, 0, 10, (loc(0, 9),)))
    c.add_committed(K, [loc(10, 14)], 15)
    info = c.lookup(K, 10, 100)
    assert info is not None and info.chunks[0].base_offset == 10 and info.high_watermark == 15
    # another agent committed 15..19 we never saw: our 20.. commit must not be learnt
    c.add_committed(K, [loc(20, 24)], 25)
    assert c.lookup(K, 20, 100) is None
    assert c.lookup(K, 10, 100) is None  # the entry was dropped as stale


def test_overlaps_are_refused_and_errors_forget() -> None:
    c = ChunkLocationCache(monotonic=Clock())
    c.store(K, PartitionFetchInfo(0, 0, 20, (loc(0, 9), loc(10, 19))))
    c.store(K, PartitionFetchInfo(0, 0, 20, (loc(5, 14, key="g"),)))  # overlapping: ignored
    info = c.lookup(K, 5, 1000)
    assert info is not None and [x.object_key for x in info.chunks] == ["f0", "f10"]
    c.store(K, PartitionFetchInfo(3))
    assert c.lookup(K, 5, 10) is None


def test_log_start_moves_drop_old_chunks_and_bounds_hold() -> None:
    c = ChunkLocationCache(monotonic=Clock(), max_partitions=2, max_chunks_per_partition=3)
    c.store(K, PartitionFetchInfo(0, 0, 50, tuple(loc(i * 10, i * 10 + 9) for i in range(5))))
    assert c.lookup(K, 5, 10) is None  # only the newest 3 chunks are kept
    assert c.lookup(K, 25, 10) is not None
    c.store(K, PartitionFetchInfo(0, 30, 50, ()))
    assert c.lookup(K, 25, 10) is None  # below the new log start
    for p in range(1, 4):
        c.store((K[0], p), PartitionFetchInfo(0, 0, 10, (loc(0, 9),)))
    assert c.lookup(K, 35, 10) is None  # evicted: at most 2 partitions
