"""Object storage: one interface, chosen by URL, in a sync and an async flavour.

    s3://bucket[/prefix]      S3 or any S3-compatible server (boto3 / aiobotocore)
    file:///abs/path          a local directory (the embedded default)
    memory://name[/prefix]    in-process; stores with the same name share contents

`open_store(url)` returns an `ObjectStore` (CLI tools, compactor, Spark executors);
`open_async_store(url)` an `AsyncObjectStore` (the asyncio agent), to use as
`async with open_async_store(url) as store:` or to close with `await store.close()`.
The contract (operations, key rules) is in `base`, request accounting in `stats`; the
errors in `errors`; the caching, coalescing wrapper the agent reads through in
`range_cache` (`RangeCache`); S3 client settings in `s3` and docs/object-store.md.

The S3 modules (and boto3/aiobotocore) are imported only when an s3:// URL is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import unquote

from .base import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_PART_BYTES,
    DELETE_BATCH,
    LIST_PAGE,
    AsyncObjectStore,
    BytesLike,
    ObjectInfo,
    ObjectStore,
    ObjectWriter,
    validate_key,
)
from .errors import (
    InvalidKey,
    InvalidRange,
    ObjectNotFound,
    PreconditionFailed,
    StorageError,
    StorageUnavailable,
)
from .file import AsyncFileStore, FileStore
from .memory import AsyncMemoryStore, MemoryStore, drop_memory_bucket
from .range_cache import RangeCache
from .stats import (
    REQUEST_KINDS,
    RequestKind,
    StatsSnapshot,
    StoreStats,
)
from .streams import (
    AsyncObjectStream,
    ObjectStream,
)

if TYPE_CHECKING:
    from .s3 import S3Options


def _scheme(url: str) -> tuple[str, str]:
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"object store URL needs a scheme (s3://, file://, memory://): {url!r}")
    return scheme.lower(), rest


def _file_root(rest: str, url: str) -> str:
    host, slash, path = rest.partition("/")
    if host not in ("", "localhost") or not slash:
        raise ValueError(f"file:// URL must be file:///absolute/path, got {url!r}")
    return "/" + unquote(path)


def _memory_parts(rest: str) -> tuple[str, str]:
    name, _, prefix = rest.partition("/")
    return name, prefix


def _s3_options(endpoint_url: str | None, s3_options: S3Options | None) -> S3Options:
    import dataclasses

    from .s3 import S3Options

    options = s3_options or S3Options()
    if endpoint_url is not None:
        options = dataclasses.replace(options, endpoint_url=endpoint_url)
    return options


def open_store(
    url: str,
    *,
    endpoint_url: str | None = None,
    s3_options: S3Options | None = None,
    fsync: bool = True,
) -> ObjectStore:
    """Open the sync store for `url`.

    `endpoint_url` / `s3_options` apply to s3:// only (by default botocore resolves the
    endpoint, region and credentials from the standard AWS settings); `fsync` to file://
    only (turn it off for throwaway test data, never for real data).
    """
    scheme, rest = _scheme(url)
    if scheme == "memory":
        return MemoryStore(*_memory_parts(rest))
    if scheme == "file":
        return FileStore(_file_root(rest, url), fsync=fsync)
    if scheme == "s3":
        from .s3 import S3Store, parse_s3_url

        bucket, prefix = parse_s3_url(url)
        return S3Store(bucket, prefix, options=_s3_options(endpoint_url, s3_options))
    raise ValueError(f"unknown object store scheme {scheme!r} in {url!r} (s3://, file://, memory://)")


def open_async_store(
    url: str,
    *,
    endpoint_url: str | None = None,
    s3_options: S3Options | None = None,
    fsync: bool = True,
) -> AsyncObjectStore:
    """Open the asyncio store for `url` (same arguments as `open_store`).

    Nothing is connected yet: the S3 client is created inside the running loop on first
    use (or by `async with`). Close with `await store.close()` or leave `async with`.
    """
    scheme, rest = _scheme(url)
    if scheme == "memory":
        return AsyncMemoryStore(*_memory_parts(rest))
    if scheme == "file":
        return AsyncFileStore(_file_root(rest, url), fsync=fsync)
    if scheme == "s3":
        from .s3 import parse_s3_url
        from .s3_async import AsyncS3Store

        bucket, prefix = parse_s3_url(url)
        return AsyncS3Store(bucket, prefix, options=_s3_options(endpoint_url, s3_options))
    raise ValueError(f"unknown object store scheme {scheme!r} in {url!r} (s3://, file://, memory://)")


def __getattr__(name: str) -> object:
    # S3Options without importing botocore for users of the other backends
    if name == "S3Options":
        from .s3 import S3Options

        return S3Options
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_PART_BYTES",
    "DELETE_BATCH",
    "LIST_PAGE",
    "REQUEST_KINDS",
    "AsyncFileStore",
    "AsyncMemoryStore",
    "AsyncObjectStore",
    "AsyncObjectStream",
    "BytesLike",
    "FileStore",
    "InvalidKey",
    "InvalidRange",
    "MemoryStore",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectStream",
    "ObjectWriter",
    "PreconditionFailed",
    "RangeCache",
    "RequestKind",
    "S3Options",
    "StatsSnapshot",
    "StorageError",
    "StorageUnavailable",
    "StoreStats",
    "drop_memory_bucket",
    "open_async_store",
    "open_store",
    "validate_key",
]
