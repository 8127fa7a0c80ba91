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
than a request). Each span load runs as its own task, registered while in flight.

Single flight: a missed range covered by a load in flight waits for that one GET; a
missed range overlapping loads in flight waits for them and loads only the bytes
between and around them (then its pieces are joined, the one copy made); those pieces
are coalesced like any missed ranges, so pieces on both sides of a load in flight within
the gap share one GET across it (re-reading up to a gap costs less than a request).
Readers await the load
through `asyncio.shield`: the cancellation of one reader (the first included) never
cancels the GET for the others. A failed load raises its error to every reader waiting
for it and is not kept: it leaves the table when it ends, and the next reader starts a
fresh GET. The table of loads in flight is bounded (`max_loads_in_flight`, over all
objects; past it a load still runs but is not offered for sharing) and each entry is
removed when its load ends, however it ends.

Cached spans are evicted least
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

Reading a cold object to its end (`get_ranges(..., to_end_bytes=N)`): when nothing of the
object is cached or being loaded, its needed ranges are read with one open-ended GET from
the first of them to the object's end (at most N bytes: `inner.stream_get`, closed after
N), again only when the budget has room for N now. Objects hold many partitions' chunks;
a caller whose request names only some of them (a client's first fetch, before all its
partitions are ready) would otherwise leave the rest for a second GET, which the next
fetch makes while the first is still in flight (no byte is read twice, but the object
costs two or three GETs). The load is shared like any other, over the N bytes it may
cover; a reader of bytes past the object's end gets the short read as an error.

`put` of an object (a file this agent just wrote) keeps the whole object when
`keep_puts` is on and it fits, so tail consumers on this agent need no GET at all.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Iterable, Sequence

from skiff.fileformat.chunk_reader import coalesce_ranges

from .base import (
    DEFAULT_CHUNK_SIZE,
    AsyncObjectStore,
    BytesLike,
    ObjectInfo,
    as_bytes,
)
from .streams import (
    AsyncObjectStream,
)

MiB = 1 << 20
DEFAULT_COALESCE_GAP_BYTES = MiB
DEFAULT_MAX_INFLIGHT_BYTES = 128 * MiB
DEFAULT_MAX_LOADS_IN_FLIGHT = 4096

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
    """One ranged GET in flight: [start, end) of an object; `task` is set at once. A load
    `to_end` reads from `start` to the object's end, at most to `end`: `end` is cut to
    what it read once it is done."""

    __slots__ = ("start", "end", "task", "to_end")
    task: asyncio.Task[bytes]

    def __init__(self, start: int, end: int, to_end: bool = False) -> None:
        self.start = start
        self.end = end
        self.to_end = to_end


class _Piece:
    """Part of a requested range, and the load in flight it waits for (None: not yet)."""

    __slots__ = ("start", "length", "loading")

    def __init__(self, start: int, length: int, loading: _Loading | None = None) -> None:
        self.start = start
        self.length = length
        self.loading = loading


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
        max_loads_in_flight: int = DEFAULT_MAX_LOADS_IN_FLIGHT,
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
        self._loading: dict[str, list[_Loading]] = {}  # loads in flight others can join
        self._loading_count = 0  # entries of `_loading`, at most `max_loads_in_flight`
        self.max_loads_in_flight = max_loads_in_flight
        self._bytes = 0
        self.hits = 0  # ranges answered from cache or from a load already in flight
        self.misses = 0  # ranges that needed a new load
        self.loads = 0  # ranged GETs issued
        self.loaded_bytes = 0
        self.readahead_bytes = 0  # bytes read ahead (in spans with room for them)
        self.readahead_skipped_bytes = 0  # read-ahead left out for lack of in-flight room
        self.overlap_joins = 0  # ranges that waited for loads in flight overlapping, not covering, them
        self.unshared_loads = 0  # loads not registered for sharing (the table was full)
        self.to_end_loads = 0  # cold objects read to their end in one GET (see to_end_bytes)
        self.to_end_skipped = 0  # ... not, for lack of in-flight room: read by needed ranges

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

    async def _load(self, key: str, loading: _Loading, held: int | None) -> bytes:
        start, length = loading.start, loading.end - loading.start
        try:
            if held is None:
                held = await self.inflight.acquire(length)
            try:
                if loading.to_end:
                    data = await self._read_to_end(key, start, length)
                    loading.end = start + len(data)
                else:
                    data = await self.inner.get_range(key, start, length)
                self.loaded_bytes += len(data)
                self._insert(key, start, data)
            finally:
                self.inflight.release(held)
        finally:
            # done (bytes cached) or failed (nothing kept: the next reader loads afresh)
            spans = self._loading.get(key)
            if spans is not None and loading in spans:
                spans.remove(loading)
                self._loading_count -= 1
                if not spans:
                    del self._loading[key]
        return data

    async def _read_to_end(self, key: str, start: int, max_length: int) -> bytes:
        """[start, object end), at most `max_length` bytes: one open-ended GET."""
        stream = await self.inner.stream_get(key, start)
        try:
            return await stream.read(max_length)
        finally:
            await stream.aclose()  # past max_length: the rest is not read

    def _start_load(
        self, key: str, start: int, length: int, held: int | None = None, *, to_end: bool = False
    ) -> _Loading:
        self.loads += 1
        loading = _Loading(start, start + length, to_end)
        loading.task = asyncio.get_running_loop().create_task(self._load(key, loading, held))
        # A failed load nobody waits for any more must not be logged as never retrieved.
        loading.task.add_done_callback(lambda t: t.cancelled() or t.exception())
        if self._loading_count < self.max_loads_in_flight:
            self._loading.setdefault(key, []).append(loading)
            self._loading_count += 1
        else:  # bounded table: this load is served to its own readers only
            self.unshared_loads += 1
        return loading

    def _overlaps_flight(self, key: str, start: int, length: int) -> bool:
        end = start + length
        return any(s.start < end and start < s.end for s in self._loading.get(key, ()))

    def _needs_load(self, key: str, start: int, length: int) -> bool:
        return (
            self._lookup(key, start, length, touch=False) is None
            and self._in_flight(key, start, length) is None
        )

    def _pieces(self, key: str, start: int, length: int) -> list[_Piece] | None:
        """[start, start + length) cut along the loads in flight overlapping it: pieces
        inside a load wait for it, the others (loading None) need a load. None when no
        load in flight overlaps the range."""
        end = start + length
        overlapping = sorted(
            (s for s in self._loading.get(key, ()) if s.start < end and start < s.end),
            key=lambda s: s.start,
        )
        if not overlapping:
            return None
        pieces: list[_Piece] = []
        pos = start
        for loading in overlapping:
            if loading.end <= pos:
                continue  # inside an earlier load already taken
            if loading.start > pos:
                pieces.append(_Piece(pos, loading.start - pos))
                pos = loading.start
            upto = min(loading.end, end)
            pieces.append(_Piece(pos, upto - pos, loading))
            pos = upto
            if pos >= end:
                break
        if pos < end:
            pieces.append(_Piece(pos, end - pos))
        return pieces

    def _plan(
        self, key: str, ranges: Sequence[tuple[int, int]]
    ) -> tuple[list[BytesLike | None], list[list[_Piece]]]:
        """Per range: its cached bytes, or the pieces to wait for (a load in flight
        covering it, or the loads overlapping it plus the bytes between them)."""
        out: list[BytesLike | None] = [None] * len(ranges)
        parts: list[list[_Piece]] = [[] for _ in ranges]
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
                parts[i] = [_Piece(start, length, loading)]
                continue
            pieces = self._pieces(key, start, length)
            if pieces is not None:
                self.overlap_joins += 1  # shares the GETs in flight, loads only the rest
            parts[i] = pieces or [_Piece(start, length)]
            if any(p.loading is None for p in parts[i]):
                self.misses += 1
            else:
                self.hits += 1  # covered by loads in flight between them
        return out, parts

    async def get_ranges(
        self,
        key: str,
        ranges: Sequence[tuple[int, int]],
        *,
        gap_bytes: int | None = None,
        readahead: Sequence[tuple[int, int]] = (),
        to_end_bytes: int = 0,
    ) -> list[BytesLike]:
        """The bytes of each range (see the module docstring for caching, coalescing,
        single flight and the in-flight bound); `gap_bytes` overrides the configured
        coalescing gap for this call. `readahead` ranges are not returned: they are read
        into the cache only when they join a span read for `ranges` and the in-flight
        budget has room now. `to_end_bytes` > 0: a cold object is read from the first
        range to its end, up to that many bytes, in one GET (module docstring)."""
        gap = self.coalesce_gap_bytes if gap_bytes is None else gap_bytes
        cold = key not in self._starts and key not in self._loading
        out, parts = self._plan(key, ranges)
        unloaded = [p for pieces in parts for p in pieces if p.loading is None]
        if unloaded and not (cold and to_end_bytes > 0 and self._load_to_end(key, unloaded, to_end_bytes)):
            self._load_pieces(key, unloaded, readahead, gap)
        for i, pieces in enumerate(parts):
            if pieces:
                out[i] = await self._assemble(key, pieces)
        return [b for b in out if b is not None]

    def _load_to_end(self, key: str, pieces: list[_Piece], max_bytes: int) -> bool:
        """Start one load from the first piece to the object's end (at most `max_bytes`,
        never less than the pieces span) if the in-flight budget has room for it now;
        False (nothing started) otherwise."""
        start = min(p.start for p in pieces)
        length = max(max_bytes, max(p.start + p.length for p in pieces) - start)
        held = self.inflight.try_acquire(length) if length <= self.inflight.limit_bytes else None
        if held is None:
            self.to_end_skipped += 1
            return False
        self.to_end_loads += 1
        loading = self._start_load(key, start, length, held, to_end=True)
        for piece in pieces:
            piece.loading = loading
        return True

    def _load_pieces(
        self, key: str, pieces: list[_Piece], readahead: Sequence[tuple[int, int]], gap: int
    ) -> None:
        """Start the loads for `pieces` (nobody loads them yet), coalesced, with the
        read-ahead that joins their spans when the in-flight budget has room now. Pieces
        on both sides of a load in flight within the gap share one GET across it, as
        across any gap (re-reading up to `gap` bytes costs less than a request); a
        read-ahead range overlapping a load in flight is left out."""
        limit = self.inflight.limit_bytes
        needed = [(p.start, p.length) for p in pieces]
        extra = [
            r
            for r in readahead
            if r[1] > 0 and r[0] >= 0 and self._needs_load(key, *r) and not self._overlaps_flight(key, *r)
        ]
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
                    for m in mine:
                        pieces[m].loading = loading
                    continue
                self.readahead_skipped_bytes += ahead
            # the needed ranges alone: they wait for room
            for sub in coalesce_ranges([needed[m] for m in mine], gap, max_span_bytes=limit):
                loading = self._start_load(key, sub.start, sub.length)
                for j in sub.members:
                    pieces[mine[j]].loading = loading

    async def _assemble(self, key: str, pieces: list[_Piece]) -> BytesLike:
        """A range's bytes from the loads its pieces wait for (shielded: a cancelled
        reader never cancels a GET others wait for); one piece is a slice, no copy."""
        views: list[BytesLike] = []
        for piece in pieces:
            loading = piece.loading
            assert loading is not None  # every piece was given a load by get_ranges
            data = await asyncio.shield(loading.task)
            if loading.to_end and piece.start + piece.length > loading.start + len(data):
                raise ValueError(
                    f"{key}: asked for bytes up to {piece.start + piece.length}, the object ends at "
                    f"{loading.start + len(data)}"
                )
            if not loading.to_end and len(data) != loading.end - loading.start:
                raise ValueError(
                    f"{key}: asked for {loading.end - loading.start} bytes at {loading.start}, got {len(data)}"
                )
            offset = piece.start - loading.start
            if offset == 0 and piece.length == len(data):
                views.append(data)
            else:
                views.append(memoryview(data)[offset : offset + piece.length])
        return views[0] if len(views) == 1 else b"".join(views)

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

    def keep(self, key: str, start: int, data: bytes) -> None:
        """Hold bytes known to be `key`'s at `start` (an object another process PUT: a pod
        worker's own batches in the file the pod's writer stored), as a read would."""
        self._insert(key, start, data)

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
