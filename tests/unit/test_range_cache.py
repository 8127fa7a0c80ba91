"""The range cache wrapper: a store that caches byte ranges, loads each once (single
flight), coalesces neighbouring ranges of one object into one GET, and stays within its
byte budget. Over an in-memory store whose GETs can be held open with events."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from skiff.fileformat.objectstore import (
    AsyncMemoryStore,
    AsyncObjectStore,
    ObjectNotFound,
    drop_memory_bucket,
)
from skiff.fileformat.objectstore.range_cache import ByteBudget, RangeCache

BLOB = bytes(range(256)) * 64  # 16 KiB, every offset distinguishable


class GatedStore(AsyncMemoryStore):
    """A memory store whose get_range waits for `gate` (when set) and records its calls."""

    def __init__(self) -> None:
        self.bucket = f"rc-{uuid.uuid4().hex}"
        super().__init__(self.bucket)
        self.gate: asyncio.Event | None = None
        self.calls: list[tuple[str, int, int]] = []
        self.started = asyncio.Event()

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        self.calls.append((key, start, length))
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        return await super().get_range(key, start, length)


@pytest.fixture
async def inner() -> GatedStore:
    store = GatedStore()
    await store.put("obj", BLOB)
    await store.put("other", BLOB)
    yield store
    drop_memory_bucket(store.bucket)


async def test_is_a_store_and_passes_writes_through(inner: GatedStore) -> None:
    cache = RangeCache(inner, max_bytes=1 << 20, keep_puts=False)
    assert isinstance(cache, AsyncObjectStore)
    await cache.put("new", b"abc")
    assert await inner.get("new") == b"abc"
    assert await cache.get_range("new", 1, 2) == b"bc"
    assert inner.calls == [("new", 1, 2)]
    assert cache.stats is inner.stats  # the counters count requests to the bucket
    await cache.delete("new")
    with pytest.raises(ObjectNotFound):
        await cache.get_range("new", 0, 1)


async def test_put_keeps_the_whole_object(inner: GatedStore) -> None:
    cache = RangeCache(inner, max_bytes=1 << 20)
    await cache.put("mine", BLOB)
    assert await cache.get_ranges("mine", [(0, 10), (5000, 100)]) == [BLOB[:10], BLOB[5000:5100]]
    assert inner.calls == []  # no GET at all
    await cache.put("huge", b"x" * (2 << 20))  # larger than the cache: not kept
    assert cache.cached_bytes <= cache.max_bytes


async def test_ranges_within_the_gap_share_one_get(inner: GatedStore) -> None:
    cache = RangeCache(inner, max_bytes=1 << 20, coalesce_gap_bytes=1000)
    ranges = [(5000, 100), (0, 100), (600, 50), (9000, 10)]
    got = await cache.get_ranges("obj", ranges)
    assert [bytes(g) for g in got] == [BLOB[s : s + n] for s, n in ranges]
    # 0..650 is one read (gap 500 <= 1000), 5000..5100 and 9000..9010 are each too far
    assert sorted(inner.calls) == [("obj", 0, 650), ("obj", 5000, 100), ("obj", 9000, 10)]
    assert cache.loads == 3
    # every byte of a span read is cached, the gap included
    assert bytes(await cache.get_range("obj", 300, 200)) == BLOB[300:500]
    assert len(inner.calls) == 3
    # a smaller gap for one call (the stores' own get_ranges takes it too)
    await cache.get_ranges("other", [(0, 10), (20, 10)], gap_bytes=5)
    assert inner.calls[-2:] == [("other", 0, 10), ("other", 20, 10)]


async def test_single_flight_one_get_for_concurrent_readers(inner: GatedStore) -> None:
    cache = RangeCache(inner, max_bytes=1 << 20)
    inner.gate = asyncio.Event()
    first = asyncio.create_task(cache.get_ranges("obj", [(100, 1000)]))
    await inner.started.wait()
    # everyone asking for bytes inside the span in flight waits for that one GET
    others = [asyncio.create_task(cache.get_range("obj", 100 + i, 10)) for i in range(10)]
    await asyncio.sleep(0)
    inner.gate.set()
    assert bytes((await first)[0]) == BLOB[100:1100]
    assert [await t for t in others] == [BLOB[100 + i : 110 + i] for i in range(10)]
    assert inner.calls == [("obj", 100, 1000)]
    assert cache.misses == 1 and cache.hits == 10


async def test_cancelled_reader_does_not_fail_the_others(inner: GatedStore) -> None:
    cache = RangeCache(inner, max_bytes=1 << 20)
    inner.gate = asyncio.Event()
    first = asyncio.create_task(cache.get_range("obj", 0, 100))
    await inner.started.wait()
    second = asyncio.create_task(cache.get_range("obj", 0, 100))
    await asyncio.sleep(0)
    first.cancel()
    inner.gate.set()
    assert await second == BLOB[:100]
    assert len(inner.calls) == 1
    assert cache.contains("obj", 0, 100)  # the load finished and was kept


async def test_memory_bound_evicts_least_recently_used(inner: GatedStore) -> None:
    cache = RangeCache(inner, max_bytes=250, coalesce_gap_bytes=0)
    await cache.get_range("obj", 0, 100)
    await cache.get_range("obj", 1000, 100)
    await cache.get_range("obj", 0, 10)  # touch the first
    await cache.get_range("obj", 2000, 100)  # over budget: evicts 1000..1100
    assert cache.cached_bytes <= 250
    assert cache.contains("obj", 0, 100) and cache.contains("obj", 2000, 100)
    assert not cache.contains("obj", 1000, 100)
    # a range larger than the whole budget is served, not kept
    assert await cache.get_range("obj", 0, 1000) == BLOB[:1000]
    assert cache.cached_bytes <= 250


async def test_failed_load_is_not_cached_and_propagates(inner: GatedStore) -> None:
    cache = RangeCache(inner, max_bytes=1 << 20)
    for _ in range(2):
        with pytest.raises(ObjectNotFound):
            await cache.get_ranges("missing", [(0, 10), (20, 10)])
    assert inner.calls == [("missing", 0, 30)] * 2
    assert cache.cached_bytes == 0


# ------------------------------------------------------------------------------ bytes in flight


class CountingStore(GatedStore):
    """A gated store that tracks the bytes of its GETs in progress, their peak, and sets
    `reached` once `target` GETs are in progress at the same time."""

    def __init__(self, target: int) -> None:
        super().__init__()
        self.inflight_bytes = 0
        self.peak_bytes = 0
        self.inflight_gets = 0
        self.target = target
        self.reached = asyncio.Event()

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        self.inflight_bytes += length
        self.inflight_gets += 1
        self.peak_bytes = max(self.peak_bytes, self.inflight_bytes)
        if self.inflight_gets >= self.target:
            self.reached.set()
        try:
            return await super().get_range(key, start, length)
        finally:
            self.inflight_bytes -= length
            self.inflight_gets -= 1


async def test_bytes_in_flight_never_exceed_the_bound() -> None:
    """Many concurrent cold reads (distinct objects, so nothing is shared): the GETs in
    progress at any time hold at most `max_inflight_bytes`; the rest queue and all
    complete. Without the bound all 12 (12,000 bytes) would be in flight at once."""
    inner = CountingStore(target=3)
    try:
        for i in range(12):
            await inner.put(f"o{i}", BLOB)
        cache = RangeCache(inner, max_bytes=1 << 20, coalesce_gap_bytes=200, max_inflight_bytes=3000)
        inner.gate = asyncio.Event()
        # each call: two 400-byte ranges 200 apart, coalesced into one 1000-byte GET
        reads = [asyncio.create_task(cache.get_ranges(f"o{i}", [(0, 400), (600, 400)])) for i in range(12)]
        await inner.reached.wait()
        assert inner.inflight_gets == 3 and inner.inflight_bytes == 3000
        assert cache.inflight.used_bytes == 3000
        inner.gate.set()
        for task in reads:
            assert [bytes(b) for b in await task] == [BLOB[:400], BLOB[600:1000]]
        assert inner.peak_bytes <= 3000 and cache.inflight.peak_bytes <= 3000
        assert cache.inflight.used_bytes == 0
        assert len(inner.calls) == 12
    finally:
        drop_memory_bucket(inner.bucket)


async def test_read_ahead_joins_a_get_only_with_room() -> None:
    inner = CountingStore(target=2)
    await inner.put("obj", BLOB)
    await inner.put("other", BLOB)
    cache = RangeCache(inner, max_bytes=1 << 20, coalesce_gap_bytes=200, max_inflight_bytes=2000)
    inner.gate = asyncio.Event()
    busy = asyncio.create_task(cache.get_range("other", 0, 1500))  # holds 1500 of 2000
    await inner.started.wait()
    # 300 needed + 300 read-ahead (a 700-byte span) does not fit in the 500 left: the
    # needed range is read alone, the read-ahead dropped, not waited for
    needed = asyncio.create_task(cache.get_ranges("obj", [(0, 300)], readahead=[(400, 300)]))
    await inner.reached.wait()  # the second GET started: it had room
    assert inner.calls[1] == ("obj", 0, 300)
    inner.gate.set()
    assert bytes((await needed)[0]) == BLOB[:300]
    await busy
    assert cache.readahead_skipped_bytes == 300 and not cache.contains("obj", 400, 300)
    # with room, the read-ahead shares the GET and is cached for the next call
    assert (
        bytes((await cache.get_ranges("obj", [(1000, 300)], readahead=[(1400, 300)]))[0]) == BLOB[1000:1300]
    )
    assert inner.calls[-1] == ("obj", 1000, 700)
    assert cache.readahead_bytes == 300
    assert await cache.get_range("obj", 1400, 300) == BLOB[1400:1700]
    assert len(inner.calls) == 3
    # read-ahead alone (nothing needed in its reach) costs no GET
    await cache.get_ranges("obj", [(5000, 10)], readahead=[(9000, 100)])
    assert inner.calls[-1] == ("obj", 5000, 10) and not cache.contains("obj", 9000, 100)
    drop_memory_bucket(inner.bucket)


async def test_spans_are_not_coalesced_beyond_the_bound(inner: GatedStore) -> None:
    cache = RangeCache(inner, max_bytes=1 << 20, coalesce_gap_bytes=1000, max_inflight_bytes=2000)
    got = await cache.get_ranges("obj", [(0, 1000), (1000, 1000), (2000, 1000)])
    assert [bytes(b) for b in got] == [BLOB[0:1000], BLOB[1000:2000], BLOB[2000:3000]]
    assert inner.calls == [("obj", 0, 2000), ("obj", 2000, 1000)]
    # one range longer than the bound is read alone, holding the whole budget
    assert await cache.get_range("other", 0, 5000) == BLOB[:5000]
    assert cache.inflight.peak_bytes == 2000 and cache.inflight.used_bytes == 0


async def test_byte_budget_waiters_in_order_and_cancellation_returns_nothing() -> None:
    budget = ByteBudget(100)
    assert await budget.acquire(70) == 70
    big = asyncio.create_task(budget.acquire(60))
    small = asyncio.create_task(budget.acquire(10))
    cancelled = asyncio.create_task(budget.acquire(20))
    await asyncio.sleep(0)
    assert budget.try_acquire(1) is None  # others wait: no overtaking
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    budget.release(70)
    assert await big == 60 and await small == 10
    budget.release(60)
    budget.release(10)
    assert budget.used_bytes == 0 and budget.try_acquire(500) == 100  # capped at the limit
