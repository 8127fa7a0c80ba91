"""The asyncio driver of the chunk reader: reads chunks through an `AsyncObjectStore`.

The rules live in `fileformat.chunk_reader` (pure); this module only fetches bytes:

- `load_chunks` reads a set of chunks grouped per object, one `get_ranges` call per
  object (all objects concurrently), so that a store that coalesces (the agent's
  `RangeCache`, or any store given `gap_bytes`) reads neighbouring chunks with one GET.
  A failed object fails only the chunks in it.
- `read_fetch` answers a whole fetch: plan what every partition serves within the shared
  budget object by object (`chunk_reader.plan_reads`), load those chunks (plus,
  optionally, read-ahead of the request's other chunks that would share those GETs,
  handed to a `RangeCache` as `readahead`: it reads them only when its in-flight byte
  budget has room), run the selection in request order over the planned chunks.
  `to_end_bytes` asks a `RangeCache` to read each cold object the fetch touches from its
  first needed byte to its end in one GET (the caller's choice: see agent.handlers.fetch).
- `read_partition`, `read_chunk`: one partition, one chunk.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence

from skiff.fileformat.chunk_reader import (
    BytesLike,
    ChunkLocation,
    FetchSelection,
    PartitionRead,
    RangeKey,
    group_by_object,
    plan_readahead,
    plan_reads,
    select_fetch,
)
from skiff.fileformat.objectstore import AsyncObjectStore
from skiff.fileformat.objectstore.range_cache import RangeCache


async def load_chunks(
    store: AsyncObjectStore,
    locations: Iterable[ChunkLocation],
    *,
    gap_bytes: int | None = None,
    readahead: Iterable[ChunkLocation] = (),
    to_end_bytes: int = 0,
) -> tuple[dict[RangeKey, BytesLike], dict[RangeKey, Exception]]:
    """Read the chunks, one `get_ranges` per object: (bytes by range, errors by range).
    `readahead` chunks are offered to a `RangeCache` store (read along if they join a
    GET, cached, not returned), and so is `to_end_bytes` (cold objects read to their end);
    other stores ignore both."""
    groups = group_by_object(locations)
    ahead = group_by_object(readahead) if isinstance(store, RangeCache) else {}

    def get(key: str, ranges: list[tuple[int, int]]) -> Awaitable[list[BytesLike]]:
        if isinstance(store, RangeCache) and (key in ahead or to_end_bytes > 0):
            return store.get_ranges(
                key, ranges, gap_bytes=gap_bytes, readahead=ahead.get(key, ()), to_end_bytes=to_end_bytes
            )
        return store.get_ranges(key, ranges, gap_bytes=gap_bytes)

    answers = await asyncio.gather(
        *(get(key, ranges) for key, ranges in groups.items()),
        return_exceptions=True,
    )
    loaded: dict[RangeKey, BytesLike] = {}
    failed: dict[RangeKey, Exception] = {}
    for (key, ranges), answer in zip(groups.items(), answers, strict=True):
        if isinstance(answer, BaseException):
            if not isinstance(answer, Exception):
                raise answer  # cancellation and the like are not a storage failure
            for pos, length in ranges:
                failed[(key, pos, length)] = answer
            continue
        for (pos, length), data in zip(ranges, answer, strict=True):
            loaded[(key, pos, length)] = data
    return loaded, failed


async def read_fetch(
    store: AsyncObjectStore,
    reads: Sequence[PartitionRead],
    max_bytes: int,
    *,
    gap_bytes: int | None = None,
    readahead_bytes: int = 0,
    readahead_gap_bytes: int = 0,
    is_cached: Callable[[RangeKey], bool] | None = None,
    verify_crc: bool = False,
    to_end_bytes: int = 0,
) -> list[FetchSelection | Exception]:
    """One fetch: a selection (or the error that made the partition unreadable) per read.

    `readahead_bytes` > 0 also offers up to that many bytes of the reads' other chunks
    that would share a GET with needed ones (within `readahead_gap_bytes`) to the store;
    only a `RangeCache` uses them (it keeps them for the next fetch), skipping chunks
    `is_cached` says it holds. `verify_crc` checks the CRC-32C of every batch returned.
    `to_end_bytes` > 0: cold objects are read to their end (at most that many bytes each).
    """
    loaded: dict[RangeKey, BytesLike] = {}
    failed: dict[RangeKey, Exception] = {}
    planned = plan_reads(reads, max_bytes)
    want = [loc for read in planned for loc in read.locations]
    extra: list[ChunkLocation] = []
    if readahead_bytes > 0 and isinstance(store, RangeCache):
        extra = plan_readahead(
            reads,
            want,
            gap_bytes=readahead_gap_bytes,
            max_bytes=readahead_bytes,
            is_cached=is_cached or (lambda _k: False),
        )
    while True:
        got, bad = await load_chunks(
            store, want, gap_bytes=gap_bytes, readahead=extra, to_end_bytes=to_end_bytes
        )
        loaded.update(got)
        failed.update(bad)
        outcome = select_fetch(planned, max_bytes, loaded, failed, verify_crc=verify_crc)
        if not outcome.missing:
            return outcome.results
        # Not reached with a complete plan; kept so that a plan bug costs a GET, not an answer.
        want = [loc for loc in outcome.missing if loc.range_key not in failed]
        extra = []
        to_end_bytes = 0


async def read_partition(
    store: AsyncObjectStore,
    locations: Sequence[ChunkLocation],
    fetch_offset: int,
    max_bytes: int,
    *,
    gap_bytes: int | None = None,
) -> FetchSelection:
    """One partition's fetch answer (its first batch unbounded, KIP-74); raises what made
    it unreadable."""
    (result,) = await read_fetch(
        store, [PartitionRead(locations, fetch_offset, max_bytes)], max_bytes, gap_bytes=gap_bytes
    )
    if isinstance(result, Exception):
        raise result
    return result


async def read_chunk(store: AsyncObjectStore, location: ChunkLocation) -> BytesLike:
    """The bytes of one chunk."""
    return await store.get_range(location.object_key, location.byte_position, location.byte_length)
