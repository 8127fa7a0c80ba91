"""Present-offset bitmaps of compacted chunks. Pure functions, no I/O.

A compacted chunk holds `present_offsets`: a serialized pyroaring `BitMap` of the offsets
still present, relative to the chunk's `base_offset` (so they fit in 32 bits). `None`
means every offset in `[base_offset, last_offset]` is present (an uncompacted chunk).

The functions take any object with `base_offset`, `last_offset` and `present_offsets`
attributes (`ChunkLocation`, `OutputChunk`, or the service's rows).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from pyroaring import BitMap

MAX_RELATIVE_OFFSET = 2**32 - 1


class ChunkLike(Protocol):
    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def present_offsets(self) -> bytes | None: ...


def serialize(offsets: Iterable[int] | BitMap) -> bytes:
    bm = offsets if isinstance(offsets, BitMap) else BitMap(offsets)
    bm.run_optimize()
    return bytes(bm.serialize())


def deserialize(data: bytes) -> BitMap:
    try:
        return BitMap.deserialize(data)
    except Exception as e:  # boundary: untrusted bytes: pyroaring raises ValueError or others on garbage
        raise ValueError(f"invalid roaring bitmap: {e}") from None


def from_absolute(base_offset: int, offsets: Iterable[int]) -> bytes:
    """Serialize absolute offsets as a bitmap relative to `base_offset`."""
    return serialize(o - base_offset for o in offsets)


def present_set(chunk: ChunkLike) -> BitMap:
    """The present offsets, relative to base_offset."""
    if chunk.present_offsets is None:
        bm = BitMap()
        bm.add_range(0, chunk.last_offset - chunk.base_offset + 1)
        return bm
    return deserialize(chunk.present_offsets)


def count_in_chunk(chunk: ChunkLike, start: int, end: int) -> int:
    """How many offsets of [start, end) (absolute) are present in the chunk."""
    lo = max(start, chunk.base_offset)
    hi = min(end, chunk.last_offset + 1)
    if hi <= lo:
        return 0
    if chunk.present_offsets is None:
        return hi - lo
    bm = deserialize(chunk.present_offsets)
    return int(bm.range_cardinality(lo - chunk.base_offset, hi - chunk.base_offset))


def count_present(chunks: Iterable[ChunkLike], start: int, end: int) -> int:
    """Exact number of records with offsets in [start, end) across non-overlapping chunks."""
    return sum(count_in_chunk(c, start, end) for c in chunks)


def next_present_in_chunk(chunk: ChunkLike, offset: int) -> int | None:
    """The smallest present offset >= `offset` in the chunk, or None."""
    if offset > chunk.last_offset:
        return None
    x = max(offset, chunk.base_offset)
    if chunk.present_offsets is None:
        return x
    bm = deserialize(chunk.present_offsets)
    rel = x - chunk.base_offset
    try:
        nxt = int(bm.next_set_bit(rel))
    except ValueError:
        return None
    absolute = chunk.base_offset + nxt
    return absolute if absolute <= chunk.last_offset else None


def next_present_offset(chunks: Iterable[ChunkLike], offset: int) -> int | None:
    """The smallest present offset >= `offset` across chunks (in offset order), or None."""
    best: int | None = None
    for c in chunks:
        n = next_present_in_chunk(c, offset)
        if n is not None and (best is None or n < best):
            best = n
    return best


def last_present_in_chunk(chunk: ChunkLike) -> int | None:
    if chunk.present_offsets is None:
        return chunk.last_offset
    bm = deserialize(chunk.present_offsets)
    if len(bm) == 0:
        return None
    return chunk.base_offset + int(bm.max())


def check_chunk_bitmap(
    base_offset: int, last_offset: int, present: bytes | None, record_count: int
) -> str | None:
    """Why a chunk's bitmap is inconsistent with its range and count, or None if it is fine."""
    if present is None:
        return None
    try:
        bm = deserialize(present)
    except ValueError as e:
        return str(e)
    if len(bm) != record_count:
        return f"bitmap holds {len(bm)} offsets but record_count is {record_count}"
    if len(bm) and int(bm.max()) > last_offset - base_offset:
        return f"bitmap offset {base_offset + int(bm.max())} is past last_offset {last_offset}"
    return None
