"""Single flight in the agent's range cache (`fileformat.objectstore.range_cache`): fetches
that miss the cache for the same object range at the same time share one GET.

Over a store stub whose GETs block on an event until the test releases them, so what
is in flight at each moment is decided by the test (no sleeps): concurrent readers of
one range and of ranges inside it cause exactly one GET; readers of ranges overlapping
loads in flight wait for them and load only the bytes nobody loads; the cancellation of
the first reader leaves the GET running for the others; an error reaches every waiter,
is not kept, and the next read does a fresh GET; the table of loads in flight is
bounded and empty once they end. A cold object read to its end (`to_end_bytes`, a
connection's first fetch) is one GET that later readers of any part of it wait for.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable

import pytest
from skiff.fileformat.objectstore import AsyncMemoryStore, StorageUnavailable, drop_memory_bucket
from skiff.fileformat.objectstore.range_cache import RangeCache
from skiff.fileformat.objectstore.streams import (
    AsyncObjectStream,
)

BLOB = bytes(range(251)) * 400  # ~100 KB, offsets distinguishable (251 is prime)
READERS = 20


class BlockingStore(AsyncMemoryStore):
    """A memory store whose GETs wait for `release` and record their ranges; the next
    `fail` GETs raise StorageUnavailable once released."""

    def __init__(self) -> None:
        self.bucket = f"sf-{uuid.uuid4().hex}"
        super().__init__(self.bucket)
        self.release = asyncio.Event()
        self.calls: list[tuple[int, int]] = []
        self.started = asyncio.Condition()
        self.fail = 0

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        async with self.started:
            self.calls.append((start, length))
            self.started.notify_all()
        await self.release.wait()
        if self.fail:
            self.fail -= 1
            raise StorageUnavailable("injected")
        return await super().get_range(key, start, length)

    async def stream_get(self, key: str, start: int = 0, *, chunk_size: int = 1 << 20) -> AsyncObjectStream:
        """An open-ended GET (a read to the object's end): recorded as (start, -1)."""
        async with self.started:
            self.calls.append((start, -1))
            self.started.notify_all()
        await self.release.wait()
        return await super().stream_get(key, start, chunk_size=chunk_size)

    async def wait_calls(self, n: int) -> None:
        """Until `n` GETs have started (they are all blocked on `release`)."""
        async with self.started:
            await self.started.wait_for(lambda: len(self.calls) >= n)


@pytest.fixture
async def store() -> AsyncIterator[BlockingStore]:
    s = BlockingStore()
    await s.put("f", BLOB)
    s.calls.clear()
    yield s
    drop_memory_bucket(s.bucket)


def cache_over(store: BlockingStore, **kwargs: int) -> RangeCache:
    return RangeCache(store, max_bytes=1 << 20, coalesce_gap_bytes=0, keep_puts=False, **kwargs)


async def settle() -> None:
    """Let every ready task run until it blocks (they block on the store's event)."""
    for _ in range(5):
        await asyncio.sleep(0)


def spawn(coro: Awaitable[bytes]) -> asyncio.Task[bytes]:
    async def run() -> bytes:
        return await coro

    return asyncio.create_task(run())


async def test_concurrent_misses_of_one_range_and_inside_it_make_one_get(store: BlockingStore) -> None:
    cache = cache_over(store)
    same = [spawn(cache.get_range("f", 1000, 5000)) for _ in range(READERS)]
    inside = [spawn(cache.get_range("f", 1000 + 200 * i, 100)) for i in range(READERS)]
    await store.wait_calls(1)
    await settle()
    assert store.calls == [(1000, 5000)]  # the first miss started the GET, the rest wait for it
    store.release.set()
    assert [await t for t in same] == [BLOB[1000:6000]] * len(same)
    assert [await t for t in inside] == [BLOB[1000 + 200 * i : 1100 + 200 * i] for i in range(READERS)]
    assert store.calls == [(1000, 5000)]
    assert cache.loads == 1 and cache.misses == 1 and cache.hits == 2 * READERS - 1
    assert cache._loading == {} and cache._loading_count == 0  # cleaned on completion


async def test_overlapping_misses_load_only_what_nobody_loads(store: BlockingStore) -> None:
    cache = cache_over(store)
    first = spawn(cache.get_range("f", 1000, 1000))  # [1000, 2000)
    second = spawn(cache.get_range("f", 3000, 1000))  # [3000, 4000)
    await store.wait_calls(2)
    # [1500, 3500) overlaps both loads: waits for them, loads [2000, 3000) only;
    # [500, 1200) overlaps the first: loads [500, 1000) only
    across = [spawn(cache.get_range("f", 1500, 2000)) for _ in range(READERS)]
    before = spawn(cache.get_range("f", 500, 700))
    await settle()
    store.release.set()
    assert await first == BLOB[1000:2000] and await second == BLOB[3000:4000]
    assert [await t for t in across] == [BLOB[1500:3500]] * len(across)
    assert await before == BLOB[500:1200]
    assert sorted(store.calls) == [(500, 500), (1000, 1000), (2000, 1000), (3000, 1000)]
    # every reader of an overlapping range waited for the loads in flight; only the first
    # of each needed a load of its own (for the bytes nobody was loading)
    assert cache.overlap_joins == READERS + 1
    assert cache.misses == 4 and cache.hits == READERS - 1
    # every byte was read once and is kept: the spans read cost no GET again
    assert [await cache.get_range("f", s, n) for s, n in [(500, 500), (2000, 1000), (3000, 1000)]] == [
        BLOB[500:1000],
        BLOB[2000:3000],
        BLOB[3000:4000],
    ]
    assert len(store.calls) == 4


async def test_pieces_on_both_sides_of_a_load_within_the_gap_share_one_get(store: BlockingStore) -> None:
    cache = RangeCache(store, max_bytes=1 << 20, coalesce_gap_bytes=4000, keep_puts=False)
    first = spawn(cache.get_range("f", 1000, 1000))
    await store.wait_calls(1)
    # [500, 1000) and [2000, 2500) are 1000 bytes apart: one GET across the load in flight
    # (re-reading a gap costs less than a request), and the reader still waits for it
    wide = spawn(cache.get_range("f", 500, 2000))
    await store.wait_calls(2)
    store.release.set()
    assert await first == BLOB[1000:2000] and await wide == BLOB[500:2500]
    assert store.calls == [(1000, 1000), (500, 2000)]
    assert cache.overlap_joins == 1 and cache.loads == 2


async def test_cancelling_the_first_reader_does_not_cancel_the_get(store: BlockingStore) -> None:
    cache = cache_over(store)
    first = spawn(cache.get_range("f", 0, 4000))
    await store.wait_calls(1)
    others = [spawn(cache.get_range("f", 0, 4000)) for _ in range(READERS)]
    overlapping = spawn(cache.get_range("f", 2000, 4000))  # [4000, 6000) is loaded apart
    await settle()
    first.cancel()
    await settle()
    assert first.cancelled()
    store.release.set()
    assert [await t for t in others] == [BLOB[:4000]] * len(others)
    assert await overlapping == BLOB[2000:6000]
    assert sorted(store.calls) == [(0, 4000), (4000, 2000)]
    assert cache.contains("f", 0, 6000) is False  # two spans, each kept
    assert cache.contains("f", 0, 4000) and cache.contains("f", 4000, 2000)
    assert cache._loading == {}


async def test_an_error_reaches_every_waiter_and_a_retry_gets_afresh(store: BlockingStore) -> None:
    cache = cache_over(store)
    store.fail = 1
    readers = [spawn(cache.get_range("f", 100, 900)) for _ in range(READERS)]
    await store.wait_calls(1)
    await settle()
    store.release.set()
    outcomes = await asyncio.gather(*readers, return_exceptions=True)
    assert all(isinstance(o, StorageUnavailable) for o in outcomes)
    assert store.calls == [(100, 900)]  # one GET failed for all of them
    assert cache._loading == {} and cache.cached_bytes == 0  # the error is not kept
    retry = [spawn(cache.get_range("f", 100, 900)) for _ in range(READERS)]
    assert [await t for t in retry] == [BLOB[100:1000]] * len(retry)
    assert store.calls == [(100, 900), (100, 900)]  # one fresh GET for the retries


async def test_the_table_of_loads_in_flight_is_bounded(store: BlockingStore) -> None:
    cache = cache_over(store, max_loads_in_flight=2)
    loads = [spawn(cache.get_range("f", 1000 * i, 500)) for i in range(4)]
    await store.wait_calls(4)
    assert cache._loading_count == 2 and cache.unshared_loads == 2
    # a reader of a registered load joins it; one of an unregistered load cannot
    joined = spawn(cache.get_range("f", 0, 500))
    alone = spawn(cache.get_range("f", 3000, 500))
    await store.wait_calls(5)
    await settle()
    assert sorted(store.calls) == [(0, 500), (1000, 500), (2000, 500), (3000, 500), (3000, 500)]
    store.release.set()
    assert [await t for t in loads] == [BLOB[1000 * i : 1000 * i + 500] for i in range(4)]
    assert await joined == BLOB[:500] and await alone == BLOB[3000:3500]
    assert cache._loading == {} and cache._loading_count == 0


async def test_fetches_of_one_file_through_the_chunk_reader_share_gets(store: BlockingStore) -> None:
    """The agent's read path (`read_async.load_chunks`, one get_ranges per object):
    concurrent fetches wanting the same chunks of a file make one GET between them."""
    from skiff.fileformat.chunk_reader import ChunkLocation
    from skiff.fileformat.read_async import load_chunks

    cache = RangeCache(store, max_bytes=1 << 20, keep_puts=False)  # the default 1 MiB gap
    chunks = [
        ChunkLocation(
            chunk_id=i,
            object_key="f",
            byte_position=1000 * i,
            byte_length=900,
            base_offset=10 * i,
            last_offset=10 * i + 9,
            record_count=10,
            max_timestamp=0,
        )
        for i in range(50)
    ]
    fetches = [asyncio.create_task(load_chunks(cache, chunks)) for _ in range(READERS)]
    await store.wait_calls(1)
    await settle()
    store.release.set()
    for fetch in fetches:
        loaded, failed = await fetch
        assert not failed and len(loaded) == 50
    assert store.calls == [(0, 49 * 1000 + 900)]


async def joined(cache: RangeCache, ranges: list[tuple[int, int]], to_end_bytes: int = 0) -> bytes:
    """The bytes of `ranges` of object "f", one after the other."""
    return b"".join(bytes(b) for b in await cache.get_ranges("f", ranges, to_end_bytes=to_end_bytes))


async def test_a_cold_object_read_to_its_end_serves_a_later_wider_read_with_one_get(
    store: BlockingStore,
) -> None:
    """The sequence that cost two GETs per file: a first fetch naming one partition reads
    the start of a cold file; the next fetch, naming them all, arrives while that GET is in
    flight. Read to its end, the file is one GET both wait for."""
    cache = cache_over(store)
    first = spawn(joined(cache, [(64, 1000)], to_end_bytes=1 << 20))
    await store.wait_calls(1)
    wide = spawn(joined(cache, [(64, 1000), (5000, 2000), (90_000, len(BLOB) - 90_000)]))
    await settle()
    store.release.set()
    assert await first == BLOB[64:1064]
    assert await wide == BLOB[64:1064] + BLOB[5000:7000] + BLOB[90_000:]
    assert store.calls == [(64, -1)]
    assert cache.to_end_loads == 1 and cache.loads == 1
    assert cache.contains("f", 64, len(BLOB) - 64)


async def test_without_reading_to_the_end_the_same_sequence_costs_two_gets(store: BlockingStore) -> None:
    cache = cache_over(store)
    first = spawn(cache.get_range("f", 64, 1000))
    await store.wait_calls(1)
    wide = asyncio.ensure_future(cache.get_ranges("f", [(64, 1000), (5000, 2000)]))
    await store.wait_calls(2)
    store.release.set()
    await first
    await wide
    assert store.calls == [(64, 1000), (5000, 2000)]  # disjoint parts of one file


async def test_only_a_cold_object_is_read_to_its_end_and_only_with_room(store: BlockingStore) -> None:
    store.release.set()
    cache = cache_over(store, max_inflight_bytes=50_000)
    assert bytes(await cache.get_range("f", 0, 100)) == BLOB[:100]
    # something of it is cached: a warm object is read by its ranges
    (got,) = await cache.get_ranges("f", [(1000, 100)], to_end_bytes=1 << 20)
    assert bytes(got) == BLOB[1000:1100] and store.calls[-1] == (1000, 100)
    # a cold object whose read to the end does not fit the in-flight bound now: by its ranges
    await store.put("g", BLOB)
    (got,) = await cache.get_ranges("g", [(10, 20)], to_end_bytes=60_000)
    assert bytes(got) == BLOB[10:30] and store.calls[-1] == (10, 20)
    assert cache.to_end_loads == 0 and cache.to_end_skipped == 1
    # at most to_end_bytes are read: the rest of a larger object is left
    await store.put("h", BLOB)
    (got,) = await cache.get_ranges("h", [(10, 20)], to_end_bytes=30_000)
    assert bytes(got) == BLOB[10:30] and store.calls[-1] == (10, -1)
    assert cache.contains("h", 10, 30_000) and not cache.contains("h", 10, 30_001)
    assert cache.inflight.used_bytes == 0


async def test_a_range_past_the_end_of_an_object_read_to_its_end_is_an_error(store: BlockingStore) -> None:
    store.release.set()
    cache = cache_over(store)
    with pytest.raises(ValueError, match="the object ends at"):
        await cache.get_ranges("f", [(len(BLOB) - 10, 20)], to_end_bytes=1 << 20)
