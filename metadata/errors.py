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


# Kafka protocol error codes the metadata service uses (the values of kio's ErrorCode).
UNKNOWN_SERVER_ERROR = -1
NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
OFFSET_METADATA_TOO_LARGE = 12
INVALID_TOPIC_EXCEPTION = 17
# ConflictError's code. Kafka has no generic compare-and-set failure; ILLEGAL_GENERATION
# ("the generation you worked from is stale") is the closest in meaning, and the only
# caller (the compactor) is not a Kafka client. Over HTTP a conflict is always a 409.
ILLEGAL_GENERATION = 22
CONFLICT = ILLEGAL_GENERATION
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_CONFIG = 40
INVALID_REQUEST = 42
# A commit whose object is not in the bucket with the stated size (metadata.object_check).
KAFKA_STORAGE_ERROR = 56
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
UNKNOWN_PRODUCER_ID = 59
# The metadata service's refusals of a caller (metadata.auth): no or an unknown token
# (HTTP 401), a token without the role the route needs (HTTP 403).
SASL_AUTHENTICATION_FAILED = 58
CLUSTER_AUTHORIZATION_FAILED = 31
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
