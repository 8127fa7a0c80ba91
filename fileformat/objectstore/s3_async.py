"""`s3://bucket/prefix` with aiobotocore: the asyncio S3 store used by the agent.

Same settings, key layout and error translation as the sync store in `s3.py` (see its
docstring and docs/object-store.md). The aiobotocore client is created on first use
(or on `async with`), inside the running event loop, and is bound to that loop; close
the store with `await store.close()` or by leaving `async with`. aiohttp's transport
errors (and timeouts) are translated too: no botocore or aiohttp exception escapes.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack
from typing import Any, Self

import aiohttp
import aiohttp.payload

from .base import (
    DEFAULT_CHUNK_SIZE,
    AsyncObjectStore,
    BytesLike,
    ObjectInfo,
    as_bytes,
    batched,
    check_range,
    check_stream_args,
    normalize_root_prefix,
    validate_prefix,
)
from .errors import ObjectNotFound, PreconditionFailed, StorageError, StorageUnavailable
from .s3 import (
    TRANSLATED,
    S3Layout,
    S3Options,
    range_header,
    retry_counter,
    translate_error,
    utc,
    was_retried,
)
from .stats import (
    RequestKind,
    StoreStats,
)
from .streams import (
    AsyncObjectStream,
)


class UploadBody(aiohttp.payload.Payload):
    """A PUT body that aiohttp sends straight from the caller's buffer.

    Given bytes, botocore wraps them in a BytesIO (its `convert_body_to_file_like_object`
    handler) and aiohttp's BytesIOPayload then takes a buffer of it, which copies the whole
    body (BytesIO shares the bytes it was made from until asked for a buffer), and reads it
    back out in 64 KiB chunks (another copy): two copies of every 8 MiB file, 7-10 % of the
    agent's produce CPU (docs/benchmarks.md). This object is an aiohttp Payload, which
    aiohttp sends as it is (one write of a memoryview), and is file-like enough for botocore
    (`read`, `seek`, `tell`, `len`: parameter validation, Content-Length, rewinding before a
    retry). botocore does not read it here (the CRC-32C is given, the payload is not signed),
    so nothing is copied; if it did, `read` and `seek` behave as a file's.
    """

    _autoclose = True  # a view of memory, no handle: aiohttp may reuse it (a retry sends it again)

    def __init__(self, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        super().__init__(view, content_type="application/octet-stream")
        self._view = view
        self._size = view.nbytes
        self._pos = 0

    def __len__(self) -> int:
        return self._view.nbytes

    def read(self, n: int = -1) -> bytes:
        end = self._view.nbytes if n < 0 else min(self._pos + n, self._view.nbytes)
        out = bytes(self._view[self._pos : end])
        self._pos = end
        return out

    def seek(self, pos: int, whence: int = 0) -> int:
        base = (0, self._pos, self._view.nbytes)[whence]
        self._pos = max(0, min(base + pos, self._view.nbytes))
        return self._pos

    def tell(self) -> int:
        return self._pos

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return bytes(self._view).decode(encoding, errors)

    async def as_bytes(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return bytes(self._view)

    async def write(self, writer: Any) -> None:
        await writer.write(self._view)

    async def write_with_length(self, writer: Any, content_length: int | None) -> None:
        await writer.write(self._view if content_length is None else self._view[:content_length])


_ASYNC_TRANSLATED: tuple[type[BaseException], ...] = (*TRANSLATED, aiohttp.ClientError, asyncio.TimeoutError)


def _translate(exc: BaseException, *, url: str, op: str, key: str | None) -> StorageError:
    if isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError):
        where = f"{url}: {op}" + (f" {key!r}" if key is not None else "")
        return StorageUnavailable(f"{where}: {type(exc).__name__}: {exc}", key=key)
    return translate_error(exc, url=url, op=op, key=key)


class AsyncS3Store(AsyncObjectStore):
    """The asyncio S3 store (aiobotocore). Safe for concurrent use from one event loop."""

    def __init__(self, bucket: str, prefix: str = "", *, options: S3Options | None = None) -> None:
        self.options = options or S3Options()
        self._layout = S3Layout(bucket, normalize_root_prefix(prefix), self.options)
        self.url = self._layout.url
        self.stats = StoreStats()
        self._client: Any = None
        self._stack: AsyncExitStack | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    async def _c(self) -> Any:
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._closed:
                raise StorageError(f"{self.url}: the store is closed")
            if self._client is None:
                from aiobotocore.config import AioConfig
                from aiobotocore.session import get_session

                stack = AsyncExitStack()
                client = await stack.enter_async_context(
                    get_session().create_client(
                        "s3",
                        endpoint_url=self.options.endpoint_url,
                        region_name=self.options.resolved_region(),
                        config=AioConfig(**self.options.config_kwargs()),
                    )
                )
                client.meta.events.register("before-send.s3", retry_counter(self.stats))
                self._client, self._stack = client, stack
        return self._client

    async def __aenter__(self) -> Self:
        await self._c()
        return self

    async def _bounded(self, call: Any, body_bytes: int, kind: RequestKind, key: str) -> Any:
        """Await a request with an overall deadline.

        aiohttp arms its read timeout only once a request body is fully handed over, so a
        PUT to a server that stopped answering can wait forever (seen with a SIGSTOPped
        server); this bound (every attempt's connect + read timeouts, plus the body at
        1 MiB/s) guarantees a dead endpoint surfaces as StorageUnavailable.
        """
        o = self.options
        budget = o.max_attempts * (o.connect_timeout + o.read_timeout + body_bytes / (1 << 20))
        try:
            return await asyncio.wait_for(call, budget)
        except TimeoutError:
            self.stats.error(kind)
            raise StorageUnavailable(
                f"{self.url}: {kind} {key!r}: no answer within {budget:.1f}s", key=key
            ) from None

    def _fail(self, kind: RequestKind, exc: BaseException, key: str | None) -> StorageError:
        self.stats.error(kind)
        return _translate(exc, url=self.url, op=kind, key=key)

    async def put(self, key: str, data: BytesLike) -> None:
        # A memoryview is sent as it is (no copy): the caller must leave its bytes unchanged
        # until this returns; nothing here keeps a reference after that (UploadBody).
        body = data.cast("B") if isinstance(data, memoryview) else as_bytes(data)
        args = self._layout.put_args(key, body, if_none_match=False)
        args["Body"] = UploadBody(body)  # sent from `body` itself, no copy
        client = await self._c()
        self.stats.request("put", bytes_out=len(body))
        try:
            await self._bounded(client.put_object(**args), len(body), "put", key)
        except _ASYNC_TRANSLATED as exc:
            raise self._fail("put", exc, key) from exc

    async def create_if_absent(self, key: str, data: BytesLike) -> bool:
        body = as_bytes(data)
        args = self._layout.put_args(key, body, if_none_match=True)
        args["Body"] = UploadBody(body)
        client = await self._c()
        self.stats.request("create_if_absent", bytes_out=len(body))
        try:
            await self._bounded(client.put_object(**args), len(body), "create_if_absent", key)
        except _ASYNC_TRANSLATED as exc:
            err = _translate(exc, url=self.url, op="create_if_absent", key=key)
            if isinstance(err, PreconditionFailed):
                # a retry that met our own first attempt's object (see s3.was_retried)
                return was_retried(exc) and await self._holds(key, body)
            self.stats.error("create_if_absent")
            raise err from exc
        return True

    async def _holds(self, key: str, body: bytes) -> bool:
        try:
            return await self.get(key) == body
        except ObjectNotFound:
            return False

    async def _read_all(self, kind: RequestKind, key: str, args: dict[str, Any]) -> bytes:
        client = await self._c()
        self.stats.request(kind)
        try:
            response = await client.get_object(**args)
            async with response["Body"] as stream:
                body: bytes = await stream.read()
        except _ASYNC_TRANSLATED as exc:
            raise self._fail(kind, exc, key) from exc
        self.stats.received(len(body))
        return body

    async def get(self, key: str) -> bytes:
        return await self._read_all("get", key, self._layout.get_args(key))

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        check_range(start, length)
        body = await self._read_all("get_range", key, self._layout.get_args(key, range_header(start, length)))
        if len(body) != length:
            self.stats.error("get_range")
            raise self._layout.short_range(key, start, length, len(body))
        return body

    async def stream_get(
        self, key: str, start: int = 0, *, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> AsyncObjectStream:
        check_stream_args(start, chunk_size)
        args = self._layout.get_args(key, f"bytes={start}-" if start else None)
        client = await self._c()
        self.stats.request("stream_get")
        try:
            body = (await client.get_object(**args))["Body"]
        except _ASYNC_TRANSLATED as exc:
            raise self._fail("stream_get", exc, key) from exc

        async def chunks() -> AsyncIterator[bytes]:
            while True:
                try:
                    chunk: bytes = await body.read(chunk_size)
                except _ASYNC_TRANSLATED as exc:
                    raise self._fail("stream_get", exc, key) from exc
                if not chunk:
                    return
                yield chunk

        async def aclose() -> None:
            result = body.close()
            if inspect.isawaitable(result):
                await result

        return AsyncObjectStream(chunks(), aclose, self.stats)

    async def delete_many(self, keys: Iterable[str]) -> None:
        fulls = [self._layout.full(k) for k in keys]
        if not fulls:
            return
        client = await self._c()
        for batch in batched(fulls):
            self.stats.request("delete")
            try:
                response = await client.delete_objects(**self._layout.delete_args(batch))
            except _ASYNC_TRANSLATED as exc:
                raise self._fail("delete", exc, None) from exc
            err = self._layout.delete_errors(response)
            if err is not None:
                self.stats.error("delete")
                raise err

    def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        validate_prefix(prefix)
        return self._list(prefix)

    async def _list(self, prefix: str) -> AsyncIterator[ObjectInfo]:
        client = await self._c()
        token: str | None = None
        while True:
            self.stats.request("list")
            try:
                page = await client.list_objects_v2(**self._layout.list_args(prefix, token))
            except _ASYNC_TRANSLATED as exc:
                raise self._fail("list", exc, prefix) from exc
            for info in self._layout.infos(page):
                yield info
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    async def head(self, key: str) -> ObjectInfo:
        args = self._layout.get_args(key)
        client = await self._c()
        self.stats.request("head")
        try:
            response = await client.head_object(**args)
        except _ASYNC_TRANSLATED as exc:
            raise self._fail("head", exc, key) from exc
        return ObjectInfo(key, int(response["ContentLength"]), utc(response["LastModified"]))

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()


__all__ = ["AsyncS3Store"]
