"""An object store's request and byte counters.

Request accounting: every store has `stats` (`StoreStats`), counting requests by kind
and the bytes that crossed the boundary. The counts model S3 requests for every
backend: one per put/get/get_range/stream_get/head/create_if_absent call, one `delete`
per batch of up to 1000 keys, one `list` per page of up to 1000 keys. A request is
counted whether it succeeds or fails (a failed GET still costs a GET).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

RequestKind = Literal[
    "put",
    "get",
    "get_range",
    "stream_get",
    "delete",
    "list",
    "head",
    "create_if_absent",
    "create_multipart_upload",
    "upload_part",
    "complete_multipart_upload",
    "abort_multipart_upload",
]
REQUEST_KINDS: tuple[RequestKind, ...] = get_args(RequestKind)


@dataclass(frozen=True)
class StatsSnapshot:
    """An immutable copy of a store's counters.

    `requests` and `errors` hold only non-zero kinds, so a test can write
    `assert snap.requests == {"put": 1, "get_range": 2}`. `bytes_out` counts payload bytes
    sent to the store (put, create_if_absent), `bytes_in` payload bytes received from it
    (get, get_range, stream_get as consumed). `retries` counts extra HTTP attempts made by
    the S3 client's retry policy (always 0 for memory:// and file://).
    Subtracting two snapshots gives the counts in between.
    """

    requests: Mapping[str, int] = field(default_factory=dict)
    errors: Mapping[str, int] = field(default_factory=dict)
    bytes_in: int = 0
    bytes_out: int = 0
    retries: int = 0

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    def __sub__(self, other: StatsSnapshot) -> StatsSnapshot:
        def diff(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
            out = {k: a.get(k, 0) - b.get(k, 0) for k in set(a) | set(b)}
            return {k: v for k, v in sorted(out.items()) if v}

        return StatsSnapshot(
            requests=diff(self.requests, other.requests),
            errors=diff(self.errors, other.errors),
            bytes_in=self.bytes_in - other.bytes_in,
            bytes_out=self.bytes_out - other.bytes_out,
            retries=self.retries - other.retries,
        )


class StoreStats:
    """Thread-safe request and byte counters of one store (see `StatsSnapshot`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[str, int] = {}
        self._errors: dict[str, int] = {}
        self._bytes_in = 0
        self._bytes_out = 0
        self._retries = 0

    def request(self, kind: RequestKind, *, bytes_out: int = 0) -> None:
        with self._lock:
            self._requests[kind] = self._requests.get(kind, 0) + 1
            self._bytes_out += bytes_out

    def error(self, kind: RequestKind) -> None:
        with self._lock:
            self._errors[kind] = self._errors.get(kind, 0) + 1

    def received(self, nbytes: int) -> None:
        if nbytes:
            with self._lock:
                self._bytes_in += nbytes

    def retried(self, attempts: int) -> None:
        if attempts:
            with self._lock:
                self._retries += attempts

    def snapshot(self) -> StatsSnapshot:
        with self._lock:
            return StatsSnapshot(
                requests={k: v for k, v in sorted(self._requests.items()) if v},
                errors={k: v for k, v in sorted(self._errors.items()) if v},
                bytes_in=self._bytes_in,
                bytes_out=self._bytes_out,
                retries=self._retries,
            )

    def reset(self) -> StatsSnapshot:
        """Zero every counter; return the values they had."""
        with self._lock:
            snap = StatsSnapshot(
                requests={k: v for k, v in sorted(self._requests.items()) if v},
                errors={k: v for k, v in sorted(self._errors.items()) if v},
                bytes_in=self._bytes_in,
                bytes_out=self._bytes_out,
                retries=self._retries,
            )
            self._requests.clear()
            self._errors.clear()
            self._bytes_in = self._bytes_out = self._retries = 0
            return snap

    def __repr__(self) -> str:
        return f"StoreStats({self.snapshot()!r})"
