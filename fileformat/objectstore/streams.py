"""The bodies `stream_get` returns: an iterator of chunks (`ObjectStream`) and its async
flavour (`AsyncObjectStream`), each with `read(n)` for parsers and counting the bytes it
hands out into the store's `StoreStats` as they are consumed."""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import TracebackType
from typing import Self

from .stats import StoreStats


class ObjectStream(Iterator[bytes]):
    """The body of a `stream_get`: an iterator of chunks, with `read(n)` for parsers.

    Close it (or use `with`) when not reading to the end; the last chunk closes it.
    """

    def __init__(self, chunks: Iterator[bytes], close: Callable[[], None], stats: StoreStats) -> None:
        self._chunks = chunks
        self._close = close
        self._stats = stats
        self._pending = b""
        self._closed = False

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> bytes:
        if self._pending:
            chunk, self._pending = self._pending, b""
            return chunk
        if self._closed:
            raise StopIteration
        try:
            chunk = next(self._chunks)
        except StopIteration:
            self.close()
            raise
        except BaseException:
            self.close()
            raise
        self._stats.received(len(chunk))
        return chunk

    def read(self, n: int = -1) -> bytes:
        """Read `n` bytes (fewer only at the end of the object); all remaining if n < 0."""
        if n < 0:
            return b"".join(self)
        parts: builtins.list[bytes] = []
        have = 0
        while have < n:
            try:
                chunk = next(self)
            except StopIteration:
                break
            if have + len(chunk) > n:
                cut = n - have
                chunk, self._pending = chunk[:cut], chunk[cut:]
            parts.append(chunk)
            have += len(chunk)
        return b"".join(parts)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncObjectStream(AsyncIterator[bytes]):
    """The async body of a `stream_get`: `async for chunk in stream`, or `await stream.read(n)`.

    Close it (`await stream.aclose()` or `async with`) when not reading to the end.
    """

    def __init__(
        self, chunks: AsyncIterator[bytes], aclose: Callable[[], Awaitable[None]], stats: StoreStats
    ) -> None:
        self._chunks = chunks
        self._aclose = aclose
        self._stats = stats
        self._pending = b""
        self._closed = False

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> bytes:
        if self._pending:
            chunk, self._pending = self._pending, b""
            return chunk
        if self._closed:
            raise StopAsyncIteration
        try:
            chunk = await anext(self._chunks)
        except StopAsyncIteration:
            await self.aclose()
            raise
        except BaseException:
            await self.aclose()
            raise
        self._stats.received(len(chunk))
        return chunk

    async def read(self, n: int = -1) -> bytes:
        """Read `n` bytes (fewer only at the end of the object); all remaining if n < 0."""
        parts: builtins.list[bytes] = []
        have = 0
        while n < 0 or have < n:
            try:
                chunk = await self.__anext__()
            except StopAsyncIteration:
                break
            if n >= 0 and have + len(chunk) > n:
                cut = n - have
                chunk, self._pending = chunk[:cut], chunk[cut:]
            parts.append(chunk)
            have += len(chunk)
        return b"".join(parts)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self._aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
