"""Fetch reader: offsets rewritten from metadata, Kafka's batch selection rules, caching."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from agent.block_cache import BlockCache
from agent.fetch_reader import read_partition
from fileformat.records import Record, build_batch, decode_records, iter_batches, validate_batch
from fileformat.segment import ChunkInput, build_segment
from metadata.types import ChunkLocation

TID = uuid.UUID(int=7)


def producer_batch(n: int, tag: str, size: int = 10) -> bytes:
    # as a producer sends it: baseOffset 0, deltas 0..n-1
    return build_batch([Record(i, 1000 + i, f"{tag}{i}".encode(), b"v" * size) for i in range(n)])


class Loader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.calls = 0

    async def __call__(self, key: str, pos: int, length: int) -> bytes:
        self.calls += 1
        await asyncio.sleep(0.01)
        return self.data[pos : pos + length]


def setup_file() -> tuple[Loader, list[ChunkLocation], list[bytes]]:
    batches = [producer_batch(3, "a"), producer_batch(2, "b"), producer_batch(4, "c")]
    data, placements = build_segment([ChunkInput(TID, 0, batches, batch_count=3, record_count=9)])
    (p,) = placements
    # metadata assigned offsets 100..108 to this chunk
    loc = ChunkLocation(
        chunk_id=1,
        object_key="f1",
        byte_position=p.data_position,
        byte_length=p.byte_length,
        base_offset=100,
        last_offset=108,
        record_count=9,
        max_timestamp=1003,
    )
    return Loader(data), [loc], batches


def offsets_of(records: bytes) -> list[int]:
    out = []
    for pos, h in iter_batches(records):
        validate_batch(records, pos)  # the CRC still holds after the rewrite
        out.extend(h.base_offset + r.offset_delta for r in decode_records(records, pos))
    return out


async def test_offsets_rewritten_from_chunk_base() -> None:
    loader, locs, _ = setup_file()
    r = await read_partition(locs, 100, 1 << 20, cache=BlockCache(1 << 20), load_range=loader)
    assert offsets_of(r.records) == list(range(100, 109))
    assert r.next_offset == 109 and r.batch_count == 3


async def test_batch_containing_fetch_offset_is_returned_whole() -> None:
    loader, locs, _ = setup_file()
    r = await read_partition(locs, 104, 1 << 20, cache=BlockCache(1 << 20), load_range=loader)
    # offset 104 is in the second batch (103..104): it comes whole, the first is skipped
    assert offsets_of(r.records) == list(range(103, 109))


async def test_max_bytes_limits_but_first_batch_always_returned() -> None:
    loader, locs, batches = setup_file()
    r = await read_partition(locs, 100, 1, cache=BlockCache(1 << 20), load_range=loader)
    assert len(r.records) == len(batches[0]) and r.next_offset == 103
    r = await read_partition(
        locs, 100, len(batches[0]) + len(batches[1]), cache=BlockCache(1 << 20), load_range=loader
    )
    assert offsets_of(r.records) == list(range(100, 105))
    r = await read_partition(
        locs, 100, 1, cache=BlockCache(1 << 20), load_range=loader, first_batch_unbounded=False
    )
    assert r.records == b""


async def test_single_flight_one_load_for_concurrent_readers() -> None:
    loader, locs, _ = setup_file()
    cache = BlockCache(1 << 20)
    results = await asyncio.gather(
        *(read_partition(locs, 100, 1 << 20, cache=cache, load_range=loader) for _ in range(10))
    )
    assert loader.calls == 1
    assert len({r.records for r in results}) == 1
    await read_partition(locs, 100, 1 << 20, cache=cache, load_range=loader)
    assert loader.calls == 1  # cached


async def test_cache_memory_bound_evicts() -> None:
    cache = BlockCache(100)

    async def load() -> bytes:
        return b"x" * 60

    await cache.get("a", 0, 60, load)
    await cache.get("b", 0, 60, load)
    assert cache.cached_bytes <= 100
    cache.put_object("whole", b"y" * 1000)  # larger than the cache: not kept
    assert cache.cached_bytes <= 100


async def test_failed_load_is_not_cached_and_propagates() -> None:
    cache = BlockCache(1000)
    calls = 0

    async def bad() -> bytes:
        nonlocal calls
        calls += 1
        raise OSError("boom")

    with pytest.raises(OSError):
        await cache.get("k", 0, 10, bad)
    with pytest.raises(OSError):
        await cache.get("k", 0, 10, bad)
    assert calls == 2


async def test_chunk_claiming_fewer_offsets_than_its_batches_is_an_error() -> None:
    loader, locs, _ = setup_file()
    bad = [ChunkLocation(**{**locs[0].__dict__, "last_offset": 105})]
    with pytest.raises(ValueError, match="past the chunk's last offset"):
        await read_partition(bad, 100, 1 << 20, cache=BlockCache(1 << 20), load_range=loader)
