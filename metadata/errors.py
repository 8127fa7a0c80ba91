"""Errors raised by the metadata service and its clients, carrying Kafka error codes.

`MetadataError.error_code` is a Kafka protocol error code (kio's `ErrorCode` values), so
the agent can put it straight into a response. `MetadataUnavailable` means the service
could not be reached or did not answer in time: always retriable.
"""

from __future__ import annotations


class MetadataError(Exception):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


class MetadataUnavailable(Exception):
    """The metadata service could not be reached; the caller should retry."""


class ConflictError(MetadataError):
    """A compare-and-set failed (e.g. compaction inputs changed meanwhile)."""
