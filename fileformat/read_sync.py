"""The synchronous driver of the chunk reader: reads chunks through an `ObjectStore`
(Spark executors, the compactor, CLI tools). The same contract as `fileformat.read_async`,
without asyncio: objects are read one after the other, each with one `get_ranges` call
(ranges at most `gap_bytes` apart share one ranged GET).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from skiff.fileformat.chunk_reader import (
    BytesLike,
    ChunkLocation,
    FetchSelection,
    PartitionRead,
    RangeKey,
    group_by_object,
    plan_reads,
    select_fetch,
)
from skiff.fileformat.objectstore import ObjectStore


def load_chunks(
    store: ObjectStore, locations: Iterable[ChunkLocation], *, gap_bytes: int | None = None
) -> tuple[dict[RangeKey, BytesLike], dict[RangeKey, Exception]]:
    """Read the chunks, one `get_ranges` per object: (bytes by range, errors by range)."""
    loaded: dict[RangeKey, BytesLike] = {}
    failed: dict[RangeKey, Exception] = {}
    for key, ranges in group_by_object(locations).items():
        try:
            answer = store.get_ranges(key, ranges, gap_bytes=gap_bytes)
        except Exception as exc:  # boundary: each range's failure is reported to its reader
            for pos, length in ranges:
                failed[(key, pos, length)] = exc
            continue
        for (pos, length), data in zip(ranges, answer, strict=True):
            loaded[(key, pos, length)] = data
    return loaded, failed


def read_fetch(
    store: ObjectStore,
    reads: Sequence[PartitionRead],
    max_bytes: int,
    *,
    gap_bytes: int | None = None,
    verify_crc: bool = False,
) -> list[FetchSelection | Exception]:
    """One fetch: a selection (or the error that made the partition unreadable) per read."""
    loaded: dict[RangeKey, BytesLike] = {}
    failed: dict[RangeKey, Exception] = {}
    planned = plan_reads(reads, max_bytes)  # what each partition serves, object by object
    want = [loc for read in planned for loc in read.locations]
    while True:
        got, bad = load_chunks(store, want, gap_bytes=gap_bytes)
        loaded.update(got)
        failed.update(bad)
        outcome = select_fetch(planned, max_bytes, loaded, failed, verify_crc=verify_crc)
        if not outcome.missing:
            return outcome.results
        want = [loc for loc in outcome.missing if loc.range_key not in failed]


def read_partition(
    store: ObjectStore,
    locations: Sequence[ChunkLocation],
    fetch_offset: int,
    max_bytes: int,
    *,
    gap_bytes: int | None = None,
) -> FetchSelection:
    """One partition's fetch answer (its first batch unbounded, KIP-74); raises what made
    it unreadable."""
    (result,) = read_fetch(
        store, [PartitionRead(locations, fetch_offset, max_bytes)], max_bytes, gap_bytes=gap_bytes
    )
    if isinstance(result, Exception):
        raise result
    return result


def read_chunk(store: ObjectStore, location: ChunkLocation) -> bytes:
    """The bytes of one chunk."""
    return store.get_range(location.object_key, location.byte_position, location.byte_length)
