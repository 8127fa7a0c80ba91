"""The object-store interface: one contract, a sync and an async flavour.

A store is a flat namespace of immutable-once-written byte objects under a root
(`s3://bucket/prefix`, `file:///path`, `memory://name[/prefix]`). Keys are relative to
that root. The contract every implementation keeps (and `tests/contract` checks):

* `put(key, data)` writes the whole object, replacing any previous one. Readers see
  either the old or the new object, never a partial one.
* `get(key)` returns the whole object; `get_range(key, start, length)` returns exactly
  `length` bytes starting at `start`, or raises `InvalidRange` if the object is shorter
  than `start + length`. `length` must be >= 1.
* `get_ranges(key, ranges, gap_bytes=...)` returns the bytes of several (start, length)
  ranges of one object, reading ranges at most `gap_bytes` apart with one ranged GET
  (`fileformat.chunk_reader.coalesce_ranges`); the stores' default gap is 0, a caching
  wrapper (`range_cache`) has its own. The answers may be memoryviews into one buffer.
* `stream_get(key, start=0)` issues the request at once (so a missing key raises
  `ObjectNotFound` from the call itself) and returns a stream of non-empty chunks of at
  most `chunk_size` bytes whose concatenation is `object[start:]`. `start` must be 0
  or inside the object (`InvalidRange` otherwise). Close the stream (or use it as a
  context manager) if you do not read it to the end.
* `delete_many(keys)` deletes in batches of 1000 (one S3 DeleteObjects each); keys that
  do not exist are not an error.
* `list(prefix)` yields `ObjectInfo(key, size, last_modified)` for every key that
  starts with `prefix` (a string prefix, not a directory), each once, in no promised
  order (memory://, file:// and AWS S3 give UTF-8 key order; SeaweedFS lists a
  "directory" `a/` before its sibling `a-z`). For garbage collection only: it is never
  on the hot path, and a list taken while others write may or may not show their keys.
* `open_writer(key)` streams an object up: `write` pieces in order, then `commit` (the
  object appears whole, as after a put) or `abort` (nothing appears). Memory is bounded
  by `part_bytes` whatever the object's size. What the store sees: one PUT when the
  object is smaller than `part_bytes`, else one S3 multipart upload (create, a part per
  `part_bytes`, complete); file:// writes a temporary file and renames it at commit (one
  `put` in the counters); memory:// keeps the pieces until commit.
* `create_if_absent(key, data)` creates the object only if no object has the key and
  says whether it did; of concurrent callers exactly one gets True.
* `head(key)` / `size(key)` describe an object without reading it.
* Errors are the classes of `errors.py`, nothing else (plus `ValueError` for arguments
  that can never be valid).

Keys: 1-1024 bytes of UTF-8, segments separated by `/`; no leading or trailing `/`, no
empty segment, no segment starting with `.` (this rules out `.` and `..` and reserves
dot-names for the file store's temporary files), no backslash or control character, at
most 255 bytes per segment. The same rules apply to every backend, so a key that works
on `memory://` works on `file://` and S3 alike. A bad key raises `InvalidKey` before any
request is made.

Request accounting (`StoreStats`, what a request is) is in `stats`; the streams `stream_get`
returns are in `streams`; `SyncBackedAsyncStore` (the async view of a sync store) in
`sync_backed`.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import itertools
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from datetime import datetime
from types import TracebackType
from typing import Literal, NamedTuple, Self, TypeAlias

from skiff.fileformat.chunk_reader import Span, coalesce_ranges

from .errors import InvalidKey
from .stats import StoreStats
from .streams import AsyncObjectStream, ObjectStream

# --------------------------------------------------------------------------- constants

DELETE_BATCH = 1000
"""Keys per delete request (the S3 DeleteObjects maximum)."""

LIST_PAGE = 1000
"""Keys per list page (the S3 ListObjectsV2 maximum)."""

DEFAULT_CHUNK_SIZE = 1 << 20
"""Default chunk size of `stream_get`."""

MAX_KEY_BYTES = 1024
MAX_SEGMENT_BYTES = 255

BytesLike: TypeAlias = bytes | bytearray | memoryview

DEFAULT_PART_BYTES = 8 << 20
"""Default part size of `open_writer` (S3 multipart: every part but the last is this big)."""

MIN_PART_BYTES = 5 << 20
"""S3's smallest part (all but the last)."""


class ObjectInfo(NamedTuple):
    """What `list` and `head` report about one object."""

    key: str
    size: int
    last_modified: datetime  # timezone-aware (UTC)


# --------------------------------------------------------------------------- keys


def _check_chars(text: str, what: str) -> None:
    for ch in text:
        if ch < " " or ch == "\x7f" or ch == "\\":
            raise InvalidKey(f"{what} {text!r} contains a control character or backslash", key=text)


def validate_key(key: str) -> str:
    """Return `key` if it is a safe object key (see the module docstring), else raise InvalidKey."""
    if not isinstance(key, str):
        raise InvalidKey(f"key must be a str, not {type(key).__name__}")
    if not key:
        raise InvalidKey("key is empty", key=key)
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise InvalidKey(f"key is longer than {MAX_KEY_BYTES} bytes", key=key)
    _check_chars(key, "key")
    if key.startswith("/"):
        raise InvalidKey(f"key {key!r} is absolute", key=key)
    for segment in key.split("/"):
        if not segment:
            raise InvalidKey(f"key {key!r} has an empty segment (leading, trailing or double '/')", key=key)
        if segment.startswith("."):
            raise InvalidKey(f"key {key!r} has a segment starting with '.'", key=key)
        if len(segment.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES:
            raise InvalidKey(f"key {key!r} has a segment longer than {MAX_SEGMENT_BYTES} bytes", key=key)
    return key


def validate_prefix(prefix: str) -> str:
    """Return `prefix` if it is a valid list prefix: "" or the start of a valid key."""
    if not isinstance(prefix, str):
        raise InvalidKey(f"prefix must be a str, not {type(prefix).__name__}")
    if not prefix:
        return prefix
    _check_chars(prefix, "prefix")
    if prefix.startswith("/"):
        raise InvalidKey(f"prefix {prefix!r} is absolute", key=prefix)
    # Every complete segment must be a valid key segment; the last one may be partial
    # (including empty, when the prefix ends with '/'), but not a dot-name.
    segments = prefix.split("/")
    for segment in segments[:-1]:
        if not segment or segment.startswith("."):
            raise InvalidKey(f"prefix {prefix!r} has an empty or dot segment", key=prefix)
    if segments[-1].startswith("."):
        raise InvalidKey(f"prefix {prefix!r} has a segment starting with '.'", key=prefix)
    return prefix


def normalize_root_prefix(prefix: str) -> str:
    """Normalize the prefix part of a store URL: "" or "a/b/" (validated, trailing slash)."""
    prefix = prefix.strip("/")
    if not prefix:
        return ""
    try:
        validate_key(prefix)
    except InvalidKey as exc:
        raise InvalidKey(f"bad prefix in store URL: {exc}", key=prefix) from None
    return prefix + "/"


def check_range(start: int, length: int) -> None:
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")


def check_part_bytes(part_bytes: int) -> None:
    if part_bytes < MIN_PART_BYTES:
        raise ValueError(f"part_bytes must be >= {MIN_PART_BYTES} (S3's smallest part), got {part_bytes}")


def check_stream_args(start: int, chunk_size: int) -> None:
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")


def batched(keys: Iterable[str], size: int = DELETE_BATCH) -> Iterator[builtins.list[str]]:
    it = iter(keys)
    while batch := builtins.list(itertools.islice(it, size)):
        yield batch


def as_bytes(data: BytesLike) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"data must be bytes-like, not {type(data).__name__}")


def _scatter(
    span: Span, body: bytes, ranges: Sequence[tuple[int, int]], out: builtins.list[BytesLike]
) -> None:
    """Put the member ranges of one span's body into `out` (views, no copies)."""
    if len(span.members) == 1:
        out[span.members[0]] = body
        return
    view = memoryview(body)
    for i in span.members:
        start, length = ranges[i]
        out[i] = view[start - span.start : start - span.start + length]


def _slice_spans(
    ranges: Sequence[tuple[int, int]], gap_bytes: int, get_range: Callable[[int, int], bytes]
) -> builtins.list[BytesLike]:
    out: builtins.list[BytesLike] = [b""] * len(ranges)
    for span in coalesce_ranges(ranges, gap_bytes):
        _scatter(span, get_range(span.start, span.length), ranges, out)
    return out


# --------------------------------------------------------------------------- writers


class ObjectWriter(ABC):
    """A streaming upload of one object (`ObjectStore.open_writer`).

    `write` pieces in order, then `commit()`; `abort()` (or leaving a `with` block
    without committing, or by an exception) discards everything written.
    """

    def __init__(self, key: str) -> None:
        self.key = validate_key(key)
        self.bytes_written = 0
        self._state: Literal["open", "committed", "aborted"] = "open"

    def _check_open(self) -> None:
        if self._state != "open":
            raise ValueError(f"writer of {self.key!r} is already {self._state}")

    def write(self, data: BytesLike) -> int:
        """Append `data`; returns its length."""
        self._check_open()
        n = len(data)
        if n:
            try:
                self._write(data)
            except BaseException:
                self.abort()
                raise
            self.bytes_written += n
        return n

    def commit(self) -> None:
        """Publish the object (whole). A failed commit leaves nothing behind."""
        self._check_open()
        self._state = "committed"
        try:
            self._commit()
        except BaseException:
            self._state = "aborted"
            with contextlib.suppress(Exception):
                self._abort()
            raise

    def abort(self) -> None:
        """Discard what was written (idempotent; nothing after a commit)."""
        if self._state == "open":
            self._state = "aborted"
            self._abort()

    @abstractmethod
    def _write(self, data: BytesLike) -> None: ...

    @abstractmethod
    def _commit(self) -> None: ...

    @abstractmethod
    def _abort(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.abort()


class BufferedWriter(ObjectWriter):
    """Keeps the pieces and PUTs them at commit: for stores that hold objects in memory."""

    def __init__(self, store: ObjectStore, key: str) -> None:
        super().__init__(key)
        self._store = store
        self._parts: builtins.list[bytes] = []

    def _write(self, data: BytesLike) -> None:
        self._parts.append(bytes(data))

    def _commit(self) -> None:
        body = b"".join(self._parts)
        self._parts = []
        self._store.put(self.key, body)

    def _abort(self) -> None:
        self._parts = []


# --------------------------------------------------------------------------- interfaces


class ObjectStore(ABC):
    """The synchronous object store (CLI tools, compactor, Spark executors). Thread-safe."""

    url: str
    stats: StoreStats

    @abstractmethod
    def put(self, key: str, data: BytesLike) -> None:
        """Write the whole object, replacing any previous one."""

    @abstractmethod
    def get(self, key: str) -> bytes:
        """Return the whole object. Raises ObjectNotFound."""

    @abstractmethod
    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Return exactly `length` bytes from `start`. Raises ObjectNotFound, InvalidRange."""

    def get_ranges(
        self, key: str, ranges: Sequence[tuple[int, int]], *, gap_bytes: int | None = None
    ) -> builtins.list[BytesLike]:
        """The bytes of each (start, length) range, in the order given; ranges at most
        `gap_bytes` apart (default 0) share one ranged GET."""
        return _slice_spans(ranges, gap_bytes or 0, lambda start, length: self.get_range(key, start, length))

    @abstractmethod
    def stream_get(self, key: str, start: int = 0, *, chunk_size: int = DEFAULT_CHUNK_SIZE) -> ObjectStream:
        """Open a stream of `object[start:]`. Raises ObjectNotFound, InvalidRange at once."""

    @abstractmethod
    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete the keys, in batches of 1000; missing keys are ignored."""

    def delete(self, key: str) -> None:
        """Delete one key (a missing key is not an error)."""
        self.delete_many([key])

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Yield every object whose key starts with `prefix` (order not promised). GC only."""

    @abstractmethod
    def create_if_absent(self, key: str, data: BytesLike) -> bool:
        """Create the object unless the key exists; return whether this call created it."""

    def open_writer(self, key: str, *, part_bytes: int = DEFAULT_PART_BYTES) -> ObjectWriter:
        """A streaming upload of `key` (see the module docstring); memory:// keeps the
        pieces until commit, file:// and s3:// hold at most about `part_bytes`."""
        check_part_bytes(part_bytes)
        return BufferedWriter(self, key)

    @abstractmethod
    def head(self, key: str) -> ObjectInfo:
        """Describe the object without reading it. Raises ObjectNotFound."""

    def size(self, key: str) -> int:
        """The object's size in bytes (one head request). Raises ObjectNotFound."""
        return self.head(key).size

    def close(self) -> None:  # noqa: B027 - optional hook, most stores hold nothing
        """Release connections. The store must not be used afterwards."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


class AsyncObjectStore(ABC):
    """The asyncio object store (the agent). Same contract as `ObjectStore`, awaited.

    Use as `async with open_async_store(url) as store:` or call `await store.close()`.
    """

    url: str
    stats: StoreStats

    @abstractmethod
    async def put(self, key: str, data: BytesLike) -> None: ...

    @abstractmethod
    async def get(self, key: str) -> bytes: ...

    @abstractmethod
    async def get_range(self, key: str, start: int, length: int) -> bytes: ...

    async def get_ranges(
        self, key: str, ranges: Sequence[tuple[int, int]], *, gap_bytes: int | None = None
    ) -> builtins.list[BytesLike]:
        """As `ObjectStore.get_ranges`: one ranged GET per run of ranges at most `gap_bytes`
        apart (default 0), issued concurrently."""
        spans = coalesce_ranges(ranges, gap_bytes or 0)
        # Wait for every GET even when one fails: none is left running behind the caller.
        bodies = await asyncio.gather(
            *(self.get_range(key, sp.start, sp.length) for sp in spans), return_exceptions=True
        )
        out: builtins.list[BytesLike] = [b""] * len(ranges)
        for span, body in zip(spans, bodies, strict=True):
            if isinstance(body, BaseException):
                raise body
            _scatter(span, body, ranges, out)
        return out

    @abstractmethod
    async def stream_get(
        self, key: str, start: int = 0, *, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> AsyncObjectStream: ...

    @abstractmethod
    async def delete_many(self, keys: Iterable[str]) -> None: ...

    async def delete(self, key: str) -> None:
        await self.delete_many([key])

    @abstractmethod
    def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        """An async iterator (`async for info in store.list(prefix)`). GC only."""

    @abstractmethod
    async def create_if_absent(self, key: str, data: BytesLike) -> bool: ...

    @abstractmethod
    async def head(self, key: str) -> ObjectInfo: ...

    async def size(self, key: str) -> int:
        return (await self.head(key)).size

    async def close(self) -> None:  # noqa: B027 - optional hook, most stores hold nothing
        """Release connections. The store must not be used afterwards."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"
