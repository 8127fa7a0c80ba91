"""A byte-range cache for immutable objects, with single-flight loads and a memory bound.

Files in the bucket never change (invariant 3), so a byte range, once read, is valid
forever: entries are keyed by (object_key, position, length) and evicted least recently
used when the cached bytes exceed `max_bytes`. Concurrent requests for the same range
share one load (single flight): N consumers tailing the same partition cost one GET.

An agent also offers the cache whole files it has just written (`put_object`), so that
consumers at the tail are served without any GET at all; ranges inside such an object
are answered by slicing it.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable

RangeKey = tuple[str, int, int]


class BlockCache:
    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[RangeKey, bytes] = OrderedDict()
        self._objects: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._object_bytes = 0
        self._loading: dict[RangeKey, asyncio.Future[bytes]] = {}
        self.hits = 0
        self.misses = 0
        self.loads = 0

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    def put_object(self, object_key: str, data: bytes) -> None:
        """Offer a whole object (e.g. a file this agent just wrote)."""
        if len(data) > self.max_bytes or object_key in self._objects:
            return
        self._objects[object_key] = data
        self._bytes += len(data)
        self._object_bytes += len(data)
        self._evict()

    def _lookup(self, key: RangeKey) -> bytes | None:
        object_key, position, length = key
        whole = self._objects.get(object_key)
        if whole is not None and position + length <= len(whole):
            self._objects.move_to_end(object_key)
            return whole[position : position + length]
        data = self._entries.get(key)
        if data is not None:
            self._entries.move_to_end(key)
        return data

    async def get(
        self, object_key: str, position: int, length: int, load: Callable[[], Awaitable[bytes]]
    ) -> bytes:
        key = (object_key, position, length)
        data = self._lookup(key)
        if data is not None:
            self.hits += 1
            return data
        pending = self._loading.get(key)
        if pending is not None:
            self.hits += 1
            return await asyncio.shield(pending)
        self.misses += 1
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._loading[key] = fut
        try:
            self.loads += 1
            data = await load()
            if len(data) != length:
                raise ValueError(f"{object_key}: asked for {length} bytes at {position}, got {len(data)}")
        except BaseException as exc:
            fut.set_exception(exc)
            # Retrieve the exception so asyncio does not log it as never retrieved when
            # nobody else was waiting.
            fut.exception()
            raise
        finally:
            del self._loading[key]
        fut.set_result(data)
        if length <= self.max_bytes:
            self._entries[key] = data
            self._bytes += length
            self._evict()
        return data

    def _evict(self) -> None:
        while self._bytes > self.max_bytes:
            # Whole objects were written by us and are the most likely to be re-read at the
            # tail, but they are also the biggest: evict by age across both maps.
            # Evict whole objects first once they hold more than half the budget.
            if self._objects and (not self._entries or self._object_bytes > self.max_bytes // 2):
                _, data = self._objects.popitem(last=False)
                self._object_bytes -= len(data)
            elif self._entries:
                _, data = self._entries.popitem(last=False)
            else:
                break
            self._bytes -= len(data)
