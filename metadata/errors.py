"""Errors raised by the metadata service and its clients, carrying Kafka error codes.

`MetadataError.error_code` is a Kafka protocol error code (kio's `ErrorCode` values), so
the agent can put it straight into a response. `MetadataUnavailable` means the service
could not be reached or did not answer in time: always retriable.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class MetadataError(Exception):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


class MetadataUnavailable(Exception):
    """The metadata service could not be reached; the caller should retry."""


class ConflictError(MetadataError):
    """A compare-and-set failed (e.g. compaction inputs changed meanwhile)."""


# Kafka protocol error codes the metadata service uses, as plain ints (the service stores and
# serialises them), each defined from kio's ErrorCode: kio is the one source of the numbers.
UNKNOWN_SERVER_ERROR = int(ErrorCode.unknown_server_error)
NONE = int(ErrorCode.none)
OFFSET_OUT_OF_RANGE = int(ErrorCode.offset_out_of_range)
UNKNOWN_TOPIC_OR_PARTITION = int(ErrorCode.unknown_topic_or_partition)
MESSAGE_TOO_LARGE = int(ErrorCode.message_too_large)
OFFSET_METADATA_TOO_LARGE = int(ErrorCode.offset_metadata_too_large)
INVALID_TOPIC_EXCEPTION = int(ErrorCode.invalid_topic_exception)
# ConflictError's code. Kafka has no generic compare-and-set failure; ILLEGAL_GENERATION
# ("the generation you worked from is stale") is the closest in meaning, and the only
# caller (the compactor) is not a Kafka client. Over HTTP a conflict is always a 409.
ILLEGAL_GENERATION = int(ErrorCode.illegal_generation)
CONFLICT = ILLEGAL_GENERATION
TOPIC_ALREADY_EXISTS = int(ErrorCode.topic_already_exists)
INVALID_PARTITIONS = int(ErrorCode.invalid_partitions)
INVALID_CONFIG = int(ErrorCode.invalid_config)
INVALID_REQUEST = int(ErrorCode.invalid_request)
# A commit whose object is not in the bucket with the stated size (metadata.commits.object_check).
KAFKA_STORAGE_ERROR = int(ErrorCode.kafka_storage_error)
OUT_OF_ORDER_SEQUENCE_NUMBER = int(ErrorCode.out_of_order_sequence_number)
INVALID_PRODUCER_EPOCH = int(ErrorCode.invalid_producer_epoch)
UNKNOWN_PRODUCER_ID = int(ErrorCode.unknown_producer_id)
# The metadata service's refusals of a caller (metadata.server.auth): no or an unknown token
# (HTTP 401), a token without the role the route needs (HTTP 403).
SASL_AUTHENTICATION_FAILED = int(ErrorCode.sasl_authentication_failed)
CLUSTER_AUTHORIZATION_FAILED = int(ErrorCode.cluster_authorization_failed)
NON_EMPTY_GROUP = int(ErrorCode.non_empty_group)
GROUP_ID_NOT_FOUND = int(ErrorCode.group_id_not_found)
# Codes other metadata modules answer with (each still defines its own copy today; these are
# here so that they can import them instead: tests/unit/test_error_codes.py lists the copies).
REQUEST_TIMED_OUT = int(ErrorCode.request_timed_out)
NOT_COORDINATOR = int(ErrorCode.not_coordinator)
POLICY_VIOLATION = int(ErrorCode.policy_violation)
OPERATION_NOT_ATTEMPTED = int(ErrorCode.operation_not_attempted)
INVALID_TXN_STATE = int(ErrorCode.invalid_txn_state)
INVALID_PRODUCER_ID_MAPPING = int(ErrorCode.invalid_producer_id_mapping)
INVALID_TRANSACTION_TIMEOUT = int(ErrorCode.invalid_transaction_timeout)
CONCURRENT_TRANSACTIONS = int(ErrorCode.concurrent_transactions)
PRODUCER_FENCED = int(ErrorCode.producer_fenced)
UNSUPPORTED_SASL_MECHANISM = int(ErrorCode.unsupported_sasl_mechanism)
RESOURCE_NOT_FOUND = int(ErrorCode.resource_not_found)
UNACCEPTABLE_CREDENTIAL = int(ErrorCode.unacceptable_credential)
DUPLICATE_BROKER_REGISTRATION = int(ErrorCode.duplicate_broker_registration)
