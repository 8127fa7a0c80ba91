"""An `AsyncObjectStore` over a sync `ObjectStore`: how memory:// and file:// serve the
asyncio agent (calls inline for memory, in threads for files; one set of counters)."""

from __future__ import annotations

import asyncio
import builtins
import itertools
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TypeVar

from .base import DEFAULT_CHUNK_SIZE, LIST_PAGE, AsyncObjectStore, BytesLike, ObjectInfo, ObjectStore
from .streams import AsyncObjectStream

_END = object()
_T = TypeVar("_T")


class SyncBackedAsyncStore(AsyncObjectStore):
    """An AsyncObjectStore over a sync ObjectStore (memory:// and file://).

    With `offload=True` every blocking call runs in `asyncio.to_thread` (file I/O);
    with `offload=False` calls run inline (memory, where they never block). The stats
    object is the sync store's, so both views count into the same counters.
    """

    def __init__(self, sync: ObjectStore, *, offload: bool) -> None:
        self._sync = sync
        self._offload = offload
        self.url = sync.url
        self.stats = sync.stats

    async def _call(self, fn: Callable[..., _T], *args: object) -> _T:
        if self._offload:
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    async def put(self, key: str, data: BytesLike) -> None:
        await self._call(self._sync.put, key, data)

    async def get(self, key: str) -> bytes:
        return await self._call(self._sync.get, key)

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        return await self._call(self._sync.get_range, key, start, length)

    async def stream_get(
        self, key: str, start: int = 0, *, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> AsyncObjectStream:
        # The inner stream must not count bytes twice: give it a throwaway stats object
        # by reading its raw chunk iterator through our own AsyncObjectStream.
        inner = await self._call(lambda: self._sync.stream_get(key, start, chunk_size=chunk_size))
        raw = inner._chunks  # the raw chunks: our own stream below counts the bytes

        async def chunks() -> AsyncIterator[bytes]:
            while True:
                chunk = await self._call(next, raw, _END)
                if chunk is _END:
                    return
                assert isinstance(chunk, bytes)
                yield chunk

        async def aclose() -> None:
            await self._call(inner.close)

        return AsyncObjectStream(chunks(), aclose, self.stats)

    async def delete_many(self, keys: Iterable[str]) -> None:
        keys = builtins.list(keys)
        await self._call(self._sync.delete_many, keys)

    async def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        it = await self._call(lambda: iter(self._sync.list(prefix)))
        while True:
            page = await self._call(lambda: builtins.list(itertools.islice(it, LIST_PAGE)))
            if not page:
                return
            for info in page:
                yield info

    async def create_if_absent(self, key: str, data: BytesLike) -> bool:
        return await self._call(self._sync.create_if_absent, key, data)

    async def head(self, key: str) -> ObjectInfo:
        return await self._call(self._sync.head, key)

    async def close(self) -> None:
        await self._call(self._sync.close)
