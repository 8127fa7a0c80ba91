"""The range cache wrapper: a store that caches byte ranges, loads each once (single
flight), coalesces neighbouring ranges of one object into one GET, and stays within its
byte budget. Over an in-memory store whose GETs can be held open with events."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from fileformat.objectstore import AsyncMemoryStore, AsyncObjectStore, ObjectNotFound, drop_memory_bucket
from fileformat.objectstore.range_cache import RangeCache

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
