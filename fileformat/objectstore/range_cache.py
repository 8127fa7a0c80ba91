"""A caching wrapper over an async object store: single-flight, memory-bounded, coalescing.

`RangeCache(inner, max_bytes=..., coalesce_gap_bytes=...)` is itself an `AsyncObjectStore`
(the agent sees "a store"). Reads of byte ranges (`get_range`, `get_ranges`) are cached;
everything else passes through to `inner`, whose `stats` it shares (so the counters keep
counting real requests to the bucket).

Why this is safe: objects in the bucket never change once written (DESIGN invariant 3),
so a byte range, once read, is valid for ever. `delete` drops the object's cached bytes.

Algorithm. The cache holds *spans*: byte runs of an object as they were read (or whole
objects this process wrote, see below). A requested range is answered from any cached
span containing it (a memoryview slice, no copy). The ranges of one `get_ranges` call
that are not cached and not already being loaded are grouped into spans with
`fileformat.chunk_reader.coalesce_ranges`: ranges at most `coalesce_gap_bytes` apart
share one ranged GET (the gap's bytes are read and kept too; a 1 MiB gap costs far less
than a request). Each span load runs as its own task, registered while in flight, so
concurrent requests for bytes inside it wait for that one GET (single flight) and the
cancellation of one caller never fails the others. Cached spans are evicted least
recently used when their bytes exceed `max_bytes`; a span larger than `max_bytes` is
served but not kept. Bytes in flight are not counted: they belong to requests that are
bounded by their own size limits.

`put` of an object (a file this agent just wrote) keeps the whole object when
`keep_puts` is on and it fits, so tail consumers on this agent need no GET at all.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable, Sequence

from fileformat.chunk_reader import coalesce_ranges

from .base import DEFAULT_CHUNK_SIZE, AsyncObjectStore, AsyncObjectStream, BytesLike, ObjectInfo, as_bytes

MiB = 1 << 20
DEFAULT_COALESCE_GAP_BYTES = MiB

SpanKey = tuple[str, int]  # (object key, start)


class _Loading:
    __slots__ = ("start", "end", "task")

    def __init__(self, start: int, end: int, task: asyncio.Task[bytes]) -> None:
        self.start = start
        self.end = end
        self.task = task


class RangeCache(AsyncObjectStore):
    """See the module docstring."""

    def __init__(
        self,
        inner: AsyncObjectStore,
        *,
        max_bytes: int,
        coalesce_gap_bytes: int = DEFAULT_COALESCE_GAP_BYTES,
        keep_puts: bool = True,
    ) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        if coalesce_gap_bytes < 0:
            raise ValueError("coalesce_gap_bytes must be >= 0")
        self.inner = inner
        self.url = inner.url
        self.stats = inner.stats
        self.max_bytes = max_bytes
        self.coalesce_gap_bytes = coalesce_gap_bytes
        self.keep_puts = keep_puts
        self._spans: OrderedDict[SpanKey, bytes] = OrderedDict()  # LRU order
        self._starts: dict[str, list[int]] = {}  # per object: sorted starts of cached spans
        self._longest: dict[str, int] = {}  # per object: longest cached span (bounds lookups)
        self._loading: dict[str, list[_Loading]] = {}
        self._bytes = 0
        self.hits = 0  # ranges answered from cache or from a load already in flight
        self.misses = 0  # ranges that needed a new load
        self.loads = 0  # ranged GETs issued
        self.loaded_bytes = 0

    # ------------------------------------------------------------------ cache state

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    def clear(self) -> None:
        """Forget every cached byte (loads in flight finish and are kept)."""
        self._spans.clear()
        self._starts.clear()
        self._longest.clear()
        self._bytes = 0

    def contains(self, key: str, start: int, length: int) -> bool:
        """Whether the range is cached (without counting a hit or refreshing its age)."""
        return self._lookup(key, start, length, touch=False) is not None

    def _lookup(self, key: str, start: int, length: int, *, touch: bool = True) -> BytesLike | None:
        starts = self._starts.get(key)
        if not starts:
            return None
        end = start + length
        longest = self._longest[key]
        i = bisect.bisect_right(starts, start) - 1
        while i >= 0 and starts[i] + longest >= end:
            span_start = starts[i]
            data = self._spans[(key, span_start)]
            if span_start + len(data) >= end:
                if touch:
                    self._spans.move_to_end((key, span_start))
                if span_start == start and len(data) == length:
                    return data
                return memoryview(data)[start - span_start : end - span_start]
            i -= 1
        return None

    def _in_flight(self, key: str, start: int, length: int) -> _Loading | None:
        for loading in self._loading.get(key, ()):
            if loading.start <= start and start + length <= loading.end:
                return loading
        return None

    def _insert(self, key: str, start: int, data: bytes) -> None:
        if len(data) > self.max_bytes or not data:
            return
        span_key = (key, start)
        old = self._spans.pop(span_key, None)
        if old is not None:
            self._bytes -= len(old)
            if len(old) >= len(data):  # keep the longer of the two
                self._spans[span_key] = old
                self._bytes += len(old)
                return
        else:
            bisect.insort(self._starts.setdefault(key, []), start)
        self._spans[span_key] = data
        self._bytes += len(data)
        self._longest[key] = max(self._longest.get(key, 0), len(data))
        self._evict()

    def _drop(self, span_key: SpanKey) -> None:
        data = self._spans.pop(span_key)
        self._bytes -= len(data)
        key, start = span_key
        starts = self._starts[key]
        starts.pop(bisect.bisect_left(starts, start))
        if not starts:
            del self._starts[key]
            del self._longest[key]

    def _evict(self) -> None:
        while self._bytes > self.max_bytes and self._spans:
            self._drop(next(iter(self._spans)))

    def _forget_object(self, key: str) -> None:
        for start in list(self._starts.get(key, ())):
            self._drop((key, start))

    # ------------------------------------------------------------------ reads

    async def _load(self, key: str, start: int, length: int) -> bytes:
        try:
            data = await self.inner.get_range(key, start, length)
        finally:
            spans = self._loading.get(key, [])
            self._loading[key] = [s for s in spans if s.start != start or s.end != start + length]
            if not self._loading[key]:
                del self._loading[key]
        self.loaded_bytes += len(data)
        self._insert(key, start, data)
        return data

    def _start_load(self, key: str, start: int, length: int) -> _Loading:
        self.loads += 1
        task = asyncio.get_running_loop().create_task(self._load(key, start, length))
        # A failed load nobody waits for any more must not be logged as never retrieved.
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        loading = _Loading(start, start + length, task)
        self._loading.setdefault(key, []).append(loading)
        return loading

    async def get_ranges(
        self, key: str, ranges: Sequence[tuple[int, int]], *, gap_bytes: int | None = None
    ) -> list[BytesLike]:
        """The bytes of each range (see the module docstring for caching and coalescing);
        `gap_bytes` overrides the configured coalescing gap for this call."""
        gap = self.coalesce_gap_bytes if gap_bytes is None else gap_bytes
        out: list[BytesLike | None] = [None] * len(ranges)
        waits: list[tuple[int, _Loading]] = []
        missed: list[int] = []
        for i, (start, length) in enumerate(ranges):
            if length < 1 or start < 0:
                raise ValueError(f"bad range ({start}, {length})")
            hit = self._lookup(key, start, length)
            if hit is not None:
                self.hits += 1
                out[i] = hit
                continue
            loading = self._in_flight(key, start, length)
            if loading is not None:
                self.hits += 1
                waits.append((i, loading))
            else:
                self.misses += 1
                missed.append(i)
        if missed:
            for span in coalesce_ranges([ranges[i] for i in missed], gap):
                loading = self._start_load(key, span.start, span.length)
                waits.extend((missed[m], loading) for m in span.members)
        for i, loading in waits:
            data = await asyncio.shield(loading.task)
            start, length = ranges[i]
            if len(data) != loading.end - loading.start:
                raise ValueError(
                    f"{key}: asked for {loading.end - loading.start} bytes at {loading.start}, got {len(data)}"
                )
            offset = start - loading.start
            out[i] = (
                data if offset == 0 and length == len(data) else memoryview(data)[offset : offset + length]
            )
        return [b for b in out if b is not None]

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        (data,) = await self.get_ranges(key, [(start, length)])
        return data if isinstance(data, bytes) else bytes(data)

    async def get(self, key: str) -> bytes:
        return await self.inner.get(key)

    async def stream_get(
        self, key: str, start: int = 0, *, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> AsyncObjectStream:
        return await self.inner.stream_get(key, start, chunk_size=chunk_size)

    # ------------------------------------------------------------------ writes and the rest

    async def put(self, key: str, data: BytesLike) -> None:
        await self.inner.put(key, data)
        # A replaced object (only ever in tests: files are immutable) must not be served stale.
        self._forget_object(key)
        if self.keep_puts:
            self._insert(key, 0, as_bytes(data))

    async def create_if_absent(self, key: str, data: BytesLike) -> bool:
        return await self.inner.create_if_absent(key, data)

    async def delete_many(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        await self.inner.delete_many(keys)
        for key in keys:
            self._forget_object(key)

    def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        return self.inner.list(prefix)

    async def head(self, key: str) -> ObjectInfo:
        return await self.inner.head(key)

    async def close(self) -> None:
        await self.inner.close()
