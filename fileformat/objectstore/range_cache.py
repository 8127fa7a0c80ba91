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
served but not kept.

Bytes in flight are bounded agent-wide: every ranged GET holds its length from a byte
budget (`max_inflight_bytes`, shared by all callers: many concurrent cold fetches
queue, first come first served, instead of each holding its own tens of MiB) from
before the request until its bytes are in the cache. Spans are never coalesced beyond
that bound (a single range longer than it is read alone, holding the whole budget).
Read-ahead (`get_ranges(..., readahead=...)`: ranges nobody needs yet, read along
because they would join a needed span within the gap) is only ever speculative: it is
added to a span only when the budget has room for it at once, never waited for.

`put` of an object (a file this agent just wrote) keeps the whole object when
`keep_puts` is on and it fits, so tail consumers on this agent need no GET at all.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Iterable, Sequence

from skiff.fileformat.chunk_reader import coalesce_ranges

from .base import DEFAULT_CHUNK_SIZE, AsyncObjectStore, AsyncObjectStream, BytesLike, ObjectInfo, as_bytes

MiB = 1 << 20
DEFAULT_COALESCE_GAP_BYTES = MiB
DEFAULT_MAX_INFLIGHT_BYTES = 128 * MiB

SpanKey = tuple[str, int]  # (object key, start)


class ByteBudget:
    """Bytes in flight against a limit; waiters are served in arrival order (a large
    request is not overtaken for ever by small ones). A request larger than the limit
    takes the whole limit, so it runs alone."""

    def __init__(self, limit_bytes: int) -> None:
        if limit_bytes < 1:
            raise ValueError("limit_bytes must be >= 1")
        self.limit_bytes = limit_bytes
        self.used_bytes = 0
        self.peak_bytes = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _grant(self, n: int) -> None:
        self.used_bytes += n
        self.peak_bytes = max(self.peak_bytes, self.used_bytes)

    def try_acquire(self, n: int) -> int | None:
        """Take `n` bytes (capped at the limit) if free now and nobody waits; the amount
        taken (to release later) or None."""
        n = min(n, self.limit_bytes)
        if self._waiters or self.used_bytes + n > self.limit_bytes:
            return None
        self._grant(n)
        return n

    async def acquire(self, n: int) -> int:
        """Wait for `n` bytes (capped at the limit); the amount taken, to release later."""
        taken = self.try_acquire(n)
        if taken is not None:
            return taken
        n = min(n, self.limit_bytes)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((n, future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(n)  # granted just as we were cancelled
            else:
                self._waiters.remove((n, future))
                self._wake()
            raise
        return n

    def release(self, n: int) -> None:
        self.used_bytes -= n
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.used_bytes + self._waiters[0][0] <= self.limit_bytes:
            n, future = self._waiters.popleft()
            if not future.done():
                self._grant(n)
                future.set_result(None)


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
        max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
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
        self.inflight = ByteBudget(max_inflight_bytes)
        self._spans: OrderedDict[SpanKey, bytes] = OrderedDict()  # LRU order
        self._starts: dict[str, list[int]] = {}  # per object: sorted starts of cached spans
        self._longest: dict[str, int] = {}  # per object: longest cached span (bounds lookups)
        self._loading: dict[str, list[_Loading]] = {}
        self._bytes = 0
        self.hits = 0  # ranges answered from cache or from a load already in flight
        self.misses = 0  # ranges that needed a new load
        self.loads = 0  # ranged GETs issued
        self.loaded_bytes = 0
        self.readahead_bytes = 0  # bytes read ahead (in spans with room for them)
        self.readahead_skipped_bytes = 0  # read-ahead left out for lack of in-flight room

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

    async def _load(self, key: str, start: int, length: int, held: int | None) -> bytes:
        try:
            if held is None:
                held = await self.inflight.acquire(length)
            try:
                data = await self.inner.get_range(key, start, length)
                self.loaded_bytes += len(data)
                self._insert(key, start, data)
            finally:
                self.inflight.release(held)
        finally:
            spans = self._loading.get(key, [])
            self._loading[key] = [s for s in spans if s.start != start or s.end != start + length]
            if not self._loading[key]:
                del self._loading[key]
        return data

    def _start_load(self, key: str, start: int, length: int, held: int | None = None) -> _Loading:
        self.loads += 1
        task = asyncio.get_running_loop().create_task(self._load(key, start, length, held))
        # A failed load nobody waits for any more must not be logged as never retrieved.
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        loading = _Loading(start, start + length, task)
        self._loading.setdefault(key, []).append(loading)
        return loading

    def _needs_load(self, key: str, start: int, length: int) -> bool:
        return (
            self._lookup(key, start, length, touch=False) is None
            and self._in_flight(key, start, length) is None
        )

    async def get_ranges(
        self,
        key: str,
        ranges: Sequence[tuple[int, int]],
        *,
        gap_bytes: int | None = None,
        readahead: Sequence[tuple[int, int]] = (),
    ) -> list[BytesLike]:
        """The bytes of each range (see the module docstring for caching, coalescing and
        the in-flight bound); `gap_bytes` overrides the configured coalescing gap for this
        call. `readahead` ranges are not returned: they are read into the cache only
        when they join a span read for `ranges` and the in-flight budget has room now."""
        gap = self.coalesce_gap_bytes if gap_bytes is None else gap_bytes
        limit = self.inflight.limit_bytes
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
            needed = [ranges[i] for i in missed]
            extra = [r for r in readahead if r[1] > 0 and r[0] >= 0 and self._needs_load(key, *r)]
            together = needed + extra
            for span in coalesce_ranges(together, gap, max_span_bytes=limit):
                mine = [m for m in span.members if m < len(needed)]
                ahead = sum(together[m][1] for m in span.members if m >= len(needed))
                if not mine:
                    continue  # read-ahead alone is not worth a GET of its own
                if ahead:  # read-ahead joins this span only if there is room for it now
                    held = self.inflight.try_acquire(span.length)
                    if held is not None:
                        self.readahead_bytes += ahead
                        loading = self._start_load(key, span.start, span.length, held)
                        waits.extend((missed[m], loading) for m in mine)
                        continue
                    self.readahead_skipped_bytes += ahead
                # the needed ranges alone: they wait for room
                for sub in coalesce_ranges([needed[m] for m in mine], gap, max_span_bytes=limit):
                    loading = self._start_load(key, sub.start, sub.length)
                    waits.extend((missed[mine[j]], loading) for j in sub.members)
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
