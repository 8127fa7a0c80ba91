"""The storage errors of the object-store boundary.

Every implementation raises only these (plus `ValueError` for arguments that can never
be valid, such as a negative length). Nothing from botocore, aiohttp or `OSError`
escapes a store: the S3 implementations translate at the boundary, the file store maps
its `OSError`s, the memory store raises them directly.

    StorageError                 base class; not retriable unless a subclass says so
    +-- ObjectNotFound           the key does not exist (S3 404 NoSuchKey)
    +-- PreconditionFailed       a conditional write lost (S3 412)
    +-- InvalidRange             the object is shorter than the requested range (S3 416)
    +-- InvalidKey               the key is unsafe or malformed; nothing was sent
    +-- StorageUnavailable       connection refused/reset, timeouts, 5xx, throttling,
                                 a body corrupted in flight (BadDigest): retry later

`err.retriable` tells a caller whether trying again may help (True only for
`StorageUnavailable`). Callers that want to back off and retry catch
`StorageUnavailable`; everything else is a bug, a missing object, or a configuration
problem (bad credentials, missing bucket) that retrying will not fix.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base class of every error raised by an object store."""

    retriable: bool = False

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class ObjectNotFound(StorageError):
    """The object does not exist."""


class PreconditionFailed(StorageError):
    """A conditional request's precondition did not hold (the object already exists)."""


class InvalidRange(StorageError):
    """The requested byte range is not inside the object."""


class InvalidKey(StorageError, ValueError):
    """The key is malformed or unsafe (absolute, `..`, empty segment, control character).

    Raised before any request is made. Also a `ValueError`, since it is a caller bug.
    """


class StorageUnavailable(StorageError):
    """The store could not be reached or refused to serve right now; retrying may help."""

    retriable = True


__all__ = [
    "InvalidKey",
    "InvalidRange",
    "ObjectNotFound",
    "PreconditionFailed",
    "StorageError",
    "StorageUnavailable",
]
