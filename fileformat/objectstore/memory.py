"""`memory://name[/prefix]`: an in-process object store for tests and the playground.

Stores opened with the same name share their contents within the process (sync and
async alike), so a test can open the same bucket twice, from the agent side and from
the checking side. Contents live until `drop_memory_bucket(name)` or the process ends.
Objects are kept as immutable `bytes`; every operation holds one lock, so the store is
thread-safe and `create_if_absent` is atomic. Request counting models S3 (see `base`).
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

from .base import (
    DEFAULT_CHUNK_SIZE,
    LIST_PAGE,
    BytesLike,
    ObjectInfo,
    ObjectStore,
    as_bytes,
    batched,
    check_range,
    check_stream_args,
    normalize_root_prefix,
    validate_key,
    validate_prefix,
)
from .errors import InvalidRange, ObjectNotFound
from .stats import (
    StoreStats,
)
from .streams import (
    ObjectStream,
)
from .sync_backed import (
    SyncBackedAsyncStore,
)


class _Bucket:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, tuple[bytes, datetime]] = {}


_buckets: dict[str, _Bucket] = {}
_buckets_lock = threading.Lock()


def _bucket(name: str) -> _Bucket:
    with _buckets_lock:
        bucket = _buckets.get(name)
        if bucket is None:
            bucket = _buckets[name] = _Bucket()
        return bucket


def drop_memory_bucket(name: str) -> None:
    """Forget the contents of `memory://name` (stores already open keep the old contents)."""
    with _buckets_lock:
        _buckets.pop(name, None)


class MemoryStore(ObjectStore):
    """The sync memory store. `AsyncMemoryStore` wraps it for asyncio."""

    def __init__(self, name: str, prefix: str = "") -> None:
        self.name = name
        self._prefix = normalize_root_prefix(prefix)
        self._bucket = _bucket(name)
        self.url = f"memory://{name}/{self._prefix}".rstrip("/")
        self.stats = StoreStats()

    def _full(self, key: str) -> str:
        return self._prefix + validate_key(key)

    def _lookup(self, key: str) -> tuple[bytes, datetime]:
        full = self._full(key)
        with self._bucket.lock:
            found = self._bucket.objects.get(full)
        if found is None:
            raise ObjectNotFound(f"{self.url}: no object {key!r}", key=key)
        return found

    def put(self, key: str, data: BytesLike) -> None:
        full = self._full(key)
        body = as_bytes(data)
        self.stats.request("put", bytes_out=len(body))
        with self._bucket.lock:
            self._bucket.objects[full] = (body, datetime.now(UTC))

    def get(self, key: str) -> bytes:
        validate_key(key)
        self.stats.request("get")
        try:
            body, _ = self._lookup(key)
        except ObjectNotFound:
            self.stats.error("get")
            raise
        self.stats.received(len(body))
        return body

    def get_range(self, key: str, start: int, length: int) -> bytes:
        validate_key(key)
        check_range(start, length)
        self.stats.request("get_range")
        try:
            body, _ = self._lookup(key)
            if start + length > len(body):
                raise InvalidRange(
                    f"{self.url}: range {start}+{length} is past the end of {key!r} ({len(body)} bytes)",
                    key=key,
                )
        except (ObjectNotFound, InvalidRange):
            self.stats.error("get_range")
            raise
        self.stats.received(length)
        return body[start : start + length]

    def stream_get(self, key: str, start: int = 0, *, chunk_size: int = DEFAULT_CHUNK_SIZE) -> ObjectStream:
        validate_key(key)
        check_stream_args(start, chunk_size)
        self.stats.request("stream_get")
        try:
            body, _ = self._lookup(key)
            if start and start >= len(body):
                raise InvalidRange(
                    f"{self.url}: stream start {start} is past the end of {key!r} ({len(body)} bytes)",
                    key=key,
                )
        except (ObjectNotFound, InvalidRange):
            self.stats.error("stream_get")
            raise
        view = memoryview(body)

        def chunks() -> Iterator[bytes]:
            for pos in range(start, len(body), chunk_size):
                yield bytes(view[pos : pos + chunk_size])

        return ObjectStream(chunks(), lambda: None, self.stats)

    def delete_many(self, keys: Iterable[str]) -> None:
        fulls = [self._full(k) for k in keys]
        for batch in batched(fulls):
            self.stats.request("delete")
            with self._bucket.lock:
                for full in batch:
                    self._bucket.objects.pop(full, None)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        full_prefix = self._prefix + validate_prefix(prefix)
        with self._bucket.lock:
            found = sorted(
                (k, len(body), mtime)
                for k, (body, mtime) in self._bucket.objects.items()
                if k.startswith(full_prefix)
            )
        return self._pages(found)

    def _pages(self, found: builtins.list[tuple[str, int, datetime]]) -> Iterator[ObjectInfo]:
        cut = len(self._prefix)
        pos = 0
        while True:
            self.stats.request("list")
            for k, size, mtime in found[pos : pos + LIST_PAGE]:
                yield ObjectInfo(k[cut:], size, mtime)
            pos += LIST_PAGE
            if pos >= len(found):
                return

    def create_if_absent(self, key: str, data: BytesLike) -> bool:
        full = self._full(key)
        body = as_bytes(data)
        self.stats.request("create_if_absent", bytes_out=len(body))
        with self._bucket.lock:
            if full in self._bucket.objects:
                return False
            self._bucket.objects[full] = (body, datetime.now(UTC))
            return True

    def head(self, key: str) -> ObjectInfo:
        validate_key(key)
        self.stats.request("head")
        try:
            body, mtime = self._lookup(key)
        except ObjectNotFound:
            self.stats.error("head")
            raise
        return ObjectInfo(key, len(body), mtime)


class AsyncMemoryStore(SyncBackedAsyncStore):
    """The asyncio memory store: a `MemoryStore` called inline (its operations never block)."""

    def __init__(self, name: str, prefix: str = "") -> None:
        super().__init__(MemoryStore(name, prefix), offload=False)
