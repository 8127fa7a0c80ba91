"""Chunk-location cache, read_committed side: the last stable offset and the aborted ranges
it keeps per partition answer exactly what metadata would, or nothing."""

from __future__ import annotations

import uuid

from skiff.agent.chunk_cache import ChunkLocationCache
from skiff.metadata.types import PartitionFetchInfo

from tests.unit.test_chunk_cache import Clock, loc

K = (uuid.UUID(int=5), 0)


def committed_answer(
    hwm: int, lso: int, chunks: tuple, ranges: tuple = (), *, until: int | None = None
) -> PartitionFetchInfo:
    """What metadata's read_committed find_chunks answers (aborted pairs of the chunks' span)."""
    upper = min(lso, chunks[-1].last_offset + 1) if chunks else lso
    pairs = tuple((p, f) for p, f, _ in ranges if f < upper)
    return PartitionFetchInfo(0, 0, hwm, chunks, lso, pairs, ranges, lso if until is None else until)


def test_nothing_known_before_a_read_committed_answer() -> None:
    c = ChunkLocationCache(monotonic=Clock())
    c.store(K, PartitionFetchInfo(0, 0, 20, (loc(0, 9), loc(10, 19))))  # a read_uncommitted answer
    assert c.lookup(K, 0, 1000) is not None
    assert c.lookup_committed(K, 0, 1000) is None  # the LSO is unknown
    assert c.known_tail_committed(K, 20, 10_000) is None


def test_served_below_the_lso_with_the_aborted_ranges_of_the_span() -> None:
    c = ChunkLocationCache(monotonic=Clock())
    ranges = ((7, 2, 5), (8, 12, 14))
    c.store(K, committed_answer(30, 25, (loc(0, 9), loc(10, 19), loc(20, 29)), ranges), fetch_offset=0)
    info = c.lookup_committed(K, 0, 150)
    assert info is not None and [x.base_offset for x in info.chunks] == [0, 10]
    assert (info.last_stable_offset, info.high_watermark) == (25, 30)
    assert info.aborted == ((7, 2), (8, 12))
    # from offset 6 the first aborted transaction (last offset 5) is over: not answered
    info = c.lookup_committed(K, 6, 10)
    assert info is not None and info.aborted == ()
    info = c.lookup_committed(K, 13, 10_000)
    assert info is not None and info.aborted == ((8, 12),) and info.chunks[-1].base_offset == 20
    assert c.lookup_committed(K, 25, 100) is None  # at the LSO: not a chunk lookup


def test_a_span_without_known_aborted_ranges_is_a_miss() -> None:
    c = ChunkLocationCache(monotonic=Clock())
    # metadata had too many aborted ranges to answer them all: nothing cacheable
    c.store(K, committed_answer(20, 20, (loc(0, 9), loc(10, 19)), until=-1), fetch_offset=0)
    assert c.lookup_committed(K, 0, 1000) is None
    # an answer from offset 10 knows [10, 20) only
    c.store(K, committed_answer(20, 20, (loc(10, 19),)), fetch_offset=10)
    assert c.lookup_committed(K, 10, 1000) is not None
    assert c.lookup_committed(K, 5, 1000) is None


def test_spans_that_touch_are_merged() -> None:
    c = ChunkLocationCache(monotonic=Clock())
    c.store(K, committed_answer(10, 10, (loc(0, 9),), ((1, 3, 4),)), fetch_offset=0)
    c.store(K, committed_answer(20, 20, (loc(10, 19),), ((2, 12, 13),)), fetch_offset=10)
    info = c.lookup_committed(K, 0, 10_000)
    assert info is not None and info.aborted == ((1, 3), (2, 12)) and info.last_stable_offset == 20


def test_the_tail_waits_only_at_the_lso_of_the_confirmed_watermark() -> None:
    clock = Clock()
    c = ChunkLocationCache(monotonic=clock)
    c.store(K, committed_answer(30, 20, (loc(0, 9), loc(10, 19))), fetch_offset=0)  # an open txn at 20
    tail = c.known_tail_committed(K, 20, 100)
    assert (
        tail is not None and tail.chunks == () and (tail.last_stable_offset, tail.high_watermark) == (20, 30)
    )
    assert c.known_tail_committed(K, 19, 100) is None
    clock.t = 1.0  # the watermark is no longer fresh ...
    assert c.known_tail_committed(K, 20, 100) is None
    # ... unless the commit watch follows the partition at that watermark
    assert c.known_tail_committed(K, 20, 100, confirms=lambda hwm: hwm == 30) is not None
    # a read_uncommitted answer moves the watermark: the LSO of the new one is unknown
    c.store(K, PartitionFetchInfo(0, 0, 40, (loc(30, 39),)))
    assert c.known_tail_committed(K, 20, 100, confirms=lambda hwm: hwm == 40) is None
    assert c.known_tail_committed(K, 20, 100, confirms=lambda hwm: True) is None


def test_own_plain_commit_moves_the_lso_and_the_clean_span() -> None:
    c = ChunkLocationCache(monotonic=Clock())
    c.store(K, committed_answer(10, 10, (loc(0, 9),)), fetch_offset=0)
    c.add_committed(K, (loc(10, 19),), 20, plain=True)
    info = c.lookup_committed(K, 10, 10_000)
    assert info is not None and info.last_stable_offset == 20 and info.aborted == ()
    assert c.known_tail_committed(K, 20, 10_000) is not None
    # a transactional (or marker) commit: the LSO may have stopped; metadata must say
    c.add_committed(K, (loc(20, 29),), 30, plain=False)
    assert c.lookup_committed(K, 20, 100) is None
    assert c.known_tail_committed(K, 20, 10_000, confirms=lambda hwm: hwm == 30) is None
    assert c.known_tail_committed(K, 30, 10_000, confirms=lambda hwm: hwm == 30) is None
    # and a plain commit after it does not move it either
    c.add_committed(K, (loc(30, 39),), 40, plain=True)
    assert c.known_tail_committed(K, 40, 10_000, confirms=lambda hwm: hwm == 40) is None
    assert c.lookup(K, 30, 100) is not None  # read_uncommitted is served as before


def test_own_plain_commit_after_an_open_transaction_keeps_the_lso() -> None:
    c = ChunkLocationCache(monotonic=Clock())
    c.store(K, committed_answer(10, 5, (loc(0, 4), loc(5, 9))), fetch_offset=0)
    c.add_committed(K, (loc(10, 19),), 20, plain=True)
    info = c.lookup_committed(K, 0, 10_000)
    assert info is not None and info.last_stable_offset == 5 and [x.base_offset for x in info.chunks] == [0]


def test_aborted_ranges_are_bounded() -> None:
    c = ChunkLocationCache(monotonic=Clock(), max_aborted_per_partition=3, max_aborted_total=4)
    many = tuple((p, 2 * p, 2 * p + 1) for p in range(4))
    c.store(K, committed_answer(10, 10, (loc(0, 9),), many), fetch_offset=0)
    assert c.lookup_committed(K, 0, 100) is None and c.aborted_total == 0
    three = many[:3]
    c.store(K, committed_answer(10, 10, (loc(0, 9),), three), fetch_offset=0)
    assert c.aborted_total == 3
    other = (uuid.UUID(int=6), 0)
    c.store(other, committed_answer(10, 10, (loc(0, 9),), three), fetch_offset=0)
    assert c.lookup_committed(other, 0, 100) is None and c.aborted_total == 3  # past the total
    c.invalidate(K)
    assert c.aborted_total == 0


def test_own_transactional_data_keeps_an_lso_held_by_an_open_transaction() -> None:
    c = ChunkLocationCache(monotonic=Clock())
    c.store(K, committed_answer(10, 5, (loc(0, 4), loc(5, 9))), fetch_offset=0)
    c.add_committed(K, (loc(10, 19),), 20, plain=False, markers=False)  # more of the open txn
    tail = c.known_tail_committed(K, 5, 10_000)
    assert tail is not None and (tail.last_stable_offset, tail.high_watermark) == (5, 20)
    c.add_committed(K, (loc(20, 20),), 21, plain=False, markers=True)  # its marker: ask metadata
    assert c.known_tail_committed(K, 5, 10_000, confirms=lambda hwm: hwm == 21) is None


def test_what_the_commit_watch_hears_of_the_lso() -> None:
    clock = Clock()
    c = ChunkLocationCache(monotonic=clock)
    c.store(K, committed_answer(10, 5, (loc(0, 4), loc(5, 9))), fetch_offset=0)
    clock.t = 10.0
    # another agent committed more of the open transaction: the LSO stays at 5 at watermark 12
    c.saw_high_watermark(K, 12)
    c.saw_stable(K, 12, 5)
    tail = c.known_tail_committed(K, 5, 100, confirms=lambda hwm: hwm == 12)
    assert tail is not None and (tail.last_stable_offset, tail.high_watermark) == (5, 12)
    # then its markers: the LSO moved, the records below it are not cached: metadata
    c.saw_stable(K, 14, 14)
    assert c.known_tail_committed(K, 5, 100, confirms=lambda hwm: hwm == 14) is None
    assert c.lookup_committed(K, 5, 1000) is None
    c.saw_stable(K, 13, 12)  # older news changes nothing
    assert c.known_tail_committed(K, 14, 100, confirms=lambda hwm: hwm == 14) is not None
