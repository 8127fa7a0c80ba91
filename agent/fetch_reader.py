"""Turn chunk locations from metadata into the record bytes of one partition's fetch.

For each chunk location (in offset order) the chunk's bytes come through the block cache
(one ranged GET per miss). Agent-written chunks store the producers' relative base
offsets: the first batch of the run gets the chunk's `base_offset` and each next batch the
previous batch's base + lastOffsetDelta + 1; the 8-byte baseOffset lies outside the
CRC-32C range, so it is rewritten in the copy we send and no checksum changes.
Compactor-written chunks already carry absolute offsets.

Selection follows Kafka's rules: batches wholly below the fetch offset are skipped; a
batch that contains the fetch offset is returned whole (clients skip the records before
their position); batches are added while the partition's byte budget allows, and the
first batch is returned even when it alone is larger than the budget (so a consumer can
always make progress past a big batch).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence

from agent.block_cache import BlockCache
from fileformat.records import BatchHeader, iter_assigned_offsets, iter_batches, patch_base_offset
from metadata.types import ChunkLocation

RangeLoader = Callable[[str, int, int], Awaitable[bytes]]


class FetchReadResult:
    __slots__ = ("records", "next_offset", "batch_count")

    def __init__(self, records: bytes, next_offset: int, batch_count: int) -> None:
        self.records = records
        self.next_offset = next_offset
        self.batch_count = batch_count


async def read_partition(
    locations: Sequence[ChunkLocation],
    fetch_offset: int,
    max_bytes: int,
    *,
    cache: BlockCache,
    load_range: RangeLoader,
    first_batch_unbounded: bool = True,
) -> FetchReadResult:
    """Collect whole batches with offsets >= fetch_offset, at most `max_bytes` (see module doc)."""
    pieces: list[tuple[bytes, int, int, int | None]] = []  # (chunk data, start, size, new base)
    total = 0
    next_offset = fetch_offset
    done = False
    for loc in locations:
        if done:
            break

        def load(loc: ChunkLocation = loc) -> Awaitable[bytes]:
            return load_range(loc.object_key, loc.byte_position, loc.byte_length)

        data = await cache.get(loc.object_key, loc.byte_position, loc.byte_length, load)
        walk: Iterator[tuple[int, BatchHeader, int]]
        if loc.offsets_absolute:
            walk = ((pos, h, h.base_offset) for pos, h in iter_batches(data))
        else:
            walk = iter_assigned_offsets(data, loc.base_offset)
        for pos, header, base in walk:
            last = base + header.last_offset_delta
            if last > loc.last_offset:
                raise ValueError(
                    f"{loc.object_key}@{loc.byte_position}: batches run past the chunk's last offset"
                    f" {loc.last_offset} (got {last})"
                )
            if last < fetch_offset:
                continue
            size = header.size
            if total + size > max_bytes and (pieces or not first_batch_unbounded):
                done = True
                break
            pieces.append((data, pos, size, None if loc.offsets_absolute else base))
            total += size
            next_offset = last + 1
            if total >= max_bytes:
                done = True
                break
    out = bytearray(total)
    cursor = 0
    for data, pos, size, new_base in pieces:
        out[cursor : cursor + size] = data[pos : pos + size]
        if new_base is not None:
            patch_base_offset(out, cursor, new_base)
        cursor += size
    return FetchReadResult(bytes(out), next_offset, len(pieces))
