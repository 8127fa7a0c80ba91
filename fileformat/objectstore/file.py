"""`file:///path`: the object store of the embedded default (the playground), on a local disk.

A key maps to the path `root/<key>` with `/` as the directory separator; `validate_key`
has already rejected absolute keys, `..`, empty and dot segments, backslashes and
control characters, so a key can never name a path outside the root. Dot-names are
reserved for the store's own temporary files and are skipped by `list`.

Durability and atomicity:
* `put` writes a temporary file in the target directory, fsyncs it, renames it over
  the key (`os.replace`, atomic on POSIX) and fsyncs the directory. New directories are
  fsynced into their parents. A reader sees the old object or the new one, never a part.
* `create_if_absent` writes and fsyncs the temporary file the same way, then publishes it
  with `os.link` (which fails if the key exists): atomic and exclusive among concurrent
  writers, and never shows a partial object. On a file system without hard links it
  falls back to `O_CREAT|O_EXCL` (exclusive, but a reader may then see a partial object).
* `open_writer` writes a temporary file as the pieces arrive and publishes it at commit
  like `put` (fsync, rename, directory fsync); abort unlinks it. Counted as one `put`.
* `delete_many` unlinks files and prunes directories left empty; it does not fsync:
  deletes are garbage collection and are repeated if a crash undoes them.

Limits of a file-system namespace: a key cannot also be a "directory" of other keys
(`a` and `a/b` cannot both exist); such a put raises `StorageError`. `list` walks the
directory tree, sorts, and is meant for GC only. `OSError`s become `ObjectNotFound`
(missing file), `StorageUnavailable` (disk full, I/O error: retriable), or `StorageError`.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import BinaryIO

from .base import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_PART_BYTES,
    LIST_PAGE,
    BytesLike,
    ObjectInfo,
    ObjectStore,
    ObjectWriter,
    as_bytes,
    batched,
    check_part_bytes,
    check_range,
    check_stream_args,
    validate_key,
    validate_prefix,
)
from .errors import InvalidRange, ObjectNotFound, StorageError, StorageUnavailable
from .stats import (
    RequestKind,
    StoreStats,
)
from .streams import (
    ObjectStream,
)
from .sync_backed import (
    SyncBackedAsyncStore,
)

_RETRIABLE_ERRNOS = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EIO,
    errno.EAGAIN,
    errno.EBUSY,
    errno.ESTALE,
    errno.EINTR,
}
_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK}
_TMP_PREFIX = ".tmp-"


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _mtime(st: os.stat_result) -> datetime:
    return datetime.fromtimestamp(st.st_mtime, UTC)


class FileStore(ObjectStore):
    """The sync file store. `AsyncFileStore` runs it in threads for asyncio."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self._fsync = fsync
        self.url = "file://" + self.root
        self.stats = StoreStats()
        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as exc:
            raise self._translate(exc, None, "cannot create the store root") from exc
        if not os.path.isdir(self.root):
            raise StorageError(f"{self.url}: the store root is not a directory")

    # ------------------------------------------------------------------ helpers

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *validate_key(key).split("/"))

    def _translate(self, exc: OSError, key: str | None, what: str) -> StorageError:
        message = f"{self.url}: {what}" + (f" {key!r}" if key is not None else "") + f": {exc}"
        if isinstance(exc, FileNotFoundError | NotADirectoryError | IsADirectoryError):
            return ObjectNotFound(message, key=key)
        if exc.errno in _RETRIABLE_ERRNOS:
            return StorageUnavailable(message, key=key)
        return StorageError(message, key=key)

    @contextlib.contextmanager
    def _reading(self, kind: RequestKind, key: str) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            self.stats.error(kind)
            raise self._translate(exc, key, "cannot read") from exc
        except StorageError:
            self.stats.error(kind)
            raise

    def _sync_dir(self, path: str) -> None:
        if self._fsync:
            _fsync_dir(path)

    def _ensure_dir(self, directory: str) -> None:
        missing: builtins.list[str] = []
        path = directory
        while not os.path.isdir(path):
            missing.append(path)
            path = os.path.dirname(path)
        for path in reversed(missing):
            try:
                os.mkdir(path)
            except FileExistsError:
                if not os.path.isdir(path):
                    raise NotADirectoryError(
                        errno.ENOTDIR, "a key exists where a directory is needed", path
                    ) from None
            self._sync_dir(os.path.dirname(path))

    def _write(self, key: str, body: bytes, *, exclusive: bool) -> bool:
        path = self._path(key)
        directory = os.path.dirname(path)
        for _ in range(10):  # a concurrent delete may prune the directory under us
            self._ensure_dir(directory)
            tmp = os.path.join(directory, _TMP_PREFIX + secrets.token_hex(8))
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            except FileNotFoundError:
                continue
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(body)
                    f.flush()
                    if self._fsync:
                        os.fsync(f.fileno())
                if exclusive:
                    try:
                        os.link(tmp, path)
                    except FileExistsError:
                        return False
                    except OSError as exc:
                        if exc.errno not in _NO_HARD_LINKS:
                            raise
                        return self._write_excl_fallback(path, body)
                else:
                    if os.path.isdir(path):
                        raise IsADirectoryError(errno.EISDIR, "a directory of other keys has this name", path)
                    os.replace(tmp, path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            self._sync_dir(directory)
            return True
        raise StorageError(f"{self.url}: cannot write {key!r}: its directory keeps disappearing", key=key)

    def _write_excl_fallback(self, path: str, body: bytes) -> bool:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            f.flush()
            if self._fsync:
                os.fsync(f.fileno())
        self._sync_dir(os.path.dirname(path))
        return True

    # ------------------------------------------------------------------ operations

    def put(self, key: str, data: BytesLike) -> None:
        validate_key(key)
        body = as_bytes(data)
        self.stats.request("put", bytes_out=len(body))
        try:
            self._write(key, body, exclusive=False)
        except OSError as exc:
            self.stats.error("put")
            err = self._translate(exc, key, "cannot write")
            if isinstance(err, ObjectNotFound):  # a path component is a file, or key is a dir
                err = StorageError(str(err), key=key)
            raise err from exc

    def open_writer(self, key: str, *, part_bytes: int = DEFAULT_PART_BYTES) -> ObjectWriter:
        check_part_bytes(part_bytes)
        return _FileWriter(self, key)

    def create_if_absent(self, key: str, data: BytesLike) -> bool:
        validate_key(key)
        body = as_bytes(data)
        self.stats.request("create_if_absent", bytes_out=len(body))
        try:
            return self._write(key, body, exclusive=True)
        except OSError as exc:
            self.stats.error("create_if_absent")
            err = self._translate(exc, key, "cannot create")
            if isinstance(err, ObjectNotFound):
                err = StorageError(str(err), key=key)
            raise err from exc

    def get(self, key: str) -> bytes:
        path = self._path(key)
        self.stats.request("get")
        with self._reading("get", key), open(path, "rb") as f:
            body = f.read()
        self.stats.received(len(body))
        return body

    def get_range(self, key: str, start: int, length: int) -> bytes:
        path = self._path(key)
        check_range(start, length)
        self.stats.request("get_range")
        with self._reading("get_range", key):
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                size = os.fstat(fd).st_size
                if start + length > size:
                    raise InvalidRange(
                        f"{self.url}: range {start}+{length} is past the end of {key!r} ({size} bytes)",
                        key=key,
                    )
                parts: builtins.list[bytes] = []
                have = 0
                while have < length:
                    part = os.pread(fd, length - have, start + have)
                    if not part:
                        raise InvalidRange(f"{self.url}: {key!r} shrank while being read", key=key)
                    parts.append(part)
                    have += len(part)
            finally:
                os.close(fd)
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        self.stats.received(len(body))
        return body

    def stream_get(self, key: str, start: int = 0, *, chunk_size: int = DEFAULT_CHUNK_SIZE) -> ObjectStream:
        path = self._path(key)
        check_stream_args(start, chunk_size)
        self.stats.request("stream_get")
        with self._reading("stream_get", key):
            f: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed by the stream
            try:
                size = os.fstat(f.fileno()).st_size
                if start and start >= size:
                    raise InvalidRange(
                        f"{self.url}: stream start {start} is past the end of {key!r} ({size} bytes)", key=key
                    )
                f.seek(start)
            except BaseException:
                f.close()
                raise

        def chunks() -> Iterator[bytes]:
            while True:
                try:
                    chunk = f.read(chunk_size)
                except OSError as exc:
                    self.stats.error("stream_get")
                    raise self._translate(exc, key, "cannot read") from exc
                if not chunk:
                    return
                yield chunk

        return ObjectStream(chunks(), f.close, self.stats)

    def delete_many(self, keys: Iterable[str]) -> None:
        paths = [self._path(k) for k in keys]
        for batch in batched(paths):
            self.stats.request("delete")
            for path in batch:
                try:
                    if os.path.isdir(path):
                        continue
                    os.unlink(path)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                except OSError as exc:
                    self.stats.error("delete")
                    raise self._translate(exc, path[len(self.root) + 1 :], "cannot delete") from exc
                self._prune(os.path.dirname(path))

    def _prune(self, directory: str) -> None:
        while directory != self.root and directory.startswith(self.root + os.sep):
            try:
                os.rmdir(directory)
            except OSError:
                return
            directory = os.path.dirname(directory)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        validate_prefix(prefix)
        found = self._scan(prefix)
        return self._pages(found)

    def _scan(self, prefix: str) -> builtins.list[ObjectInfo]:
        head, _, _ = prefix.rpartition("/")
        top = os.path.join(self.root, *head.split("/")) if head else self.root
        found: builtins.list[ObjectInfo] = []
        cut = len(self.root) + 1

        def onerror(exc: OSError) -> None:
            if not isinstance(exc, FileNotFoundError | NotADirectoryError):
                raise exc

        try:
            for dirpath, dirnames, filenames in os.walk(top, onerror=onerror):
                dirnames[:] = [d for d in dirnames if not d.startswith(".")]
                rel = dirpath[cut:].replace(os.sep, "/")
                for name in filenames:
                    if name.startswith("."):
                        continue
                    key = f"{rel}/{name}" if rel else name
                    if not key.startswith(prefix):
                        continue
                    try:
                        st = os.stat(os.path.join(dirpath, name))
                    except FileNotFoundError:
                        continue
                    found.append(ObjectInfo(key, st.st_size, _mtime(st)))
        except OSError as exc:
            self.stats.request("list")
            self.stats.error("list")
            raise self._translate(exc, prefix, "cannot list") from exc
        found.sort()
        return found

    def _pages(self, found: builtins.list[ObjectInfo]) -> Iterator[ObjectInfo]:
        pos = 0
        while True:
            self.stats.request("list")
            yield from found[pos : pos + LIST_PAGE]
            pos += LIST_PAGE
            if pos >= len(found):
                return

    def head(self, key: str) -> ObjectInfo:
        path = self._path(key)
        self.stats.request("head")
        with self._reading("head", key):
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise ObjectNotFound(f"{self.url}: no object {key!r}", key=key)
        return ObjectInfo(key, st.st_size, _mtime(st))


class _FileWriter(ObjectWriter):
    """`FileStore.open_writer`: a temporary file in the key's directory, renamed at commit."""

    def __init__(self, store: FileStore, key: str) -> None:
        super().__init__(key)
        self._store = store
        self._path = store._path(key)
        self._file: BinaryIO | None = None
        self._tmp = ""

    def _open(self) -> BinaryIO:
        directory = os.path.dirname(self._path)
        for _ in range(10):  # a concurrent delete may prune the directory under us
            self._store._ensure_dir(directory)
            self._tmp = os.path.join(directory, _TMP_PREFIX + secrets.token_hex(8))
            try:
                fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            except FileNotFoundError:
                continue
            return os.fdopen(fd, "wb")
        raise StorageError(f"{self._store.url}: cannot write {self.key!r}: its directory keeps disappearing")

    def _fail(self, exc: OSError) -> StorageError:
        self._store.stats.error("put")
        err = self._store._translate(exc, self.key, "cannot write")
        return StorageError(str(err), key=self.key) if isinstance(err, ObjectNotFound) else err

    def _write(self, data: BytesLike) -> None:
        try:
            if self._file is None:
                self._file = self._open()
            self._file.write(data)
        except OSError as exc:
            raise self._fail(exc) from exc

    def _commit(self) -> None:
        store = self._store
        store.stats.request("put", bytes_out=self.bytes_written)
        try:
            if self._file is None:
                self._file = self._open()
            f, self._file = self._file, None
            with f:
                f.flush()
                if store._fsync:
                    os.fsync(f.fileno())
            if os.path.isdir(self._path):
                raise IsADirectoryError(errno.EISDIR, "a directory of other keys has this name", self._path)
            os.replace(self._tmp, self._path)
            self._tmp = ""
            store._sync_dir(os.path.dirname(self._path))
        except OSError as exc:
            raise self._fail(exc) from exc

    def _abort(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
        if self._tmp:
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
            self._tmp = ""


class AsyncFileStore(SyncBackedAsyncStore):
    """The asyncio file store: every file operation of a `FileStore` runs in `asyncio.to_thread`."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        super().__init__(FileStore(root, fsync=fsync), offload=True)
