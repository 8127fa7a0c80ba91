"""Shared by the transactional handlers: error codes as each request version knows them.

KIP-588 added PRODUCER_FENCED (90) to InitProducerId v4, AddPartitionsToTxn v2,
AddOffsetsToTxn v2, EndTxn v2 and TxnOffsetCommit v3; older versions get
INVALID_PRODUCER_EPOCH (47), which their clients treat the same way (fatal). Metadata out
of reach is COORDINATOR_NOT_AVAILABLE: transactional clients look for the coordinator
again and retry.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from skiff.agent.protocol import to_error_code
from skiff.metadata.errors import INVALID_PRODUCER_EPOCH, PRODUCER_FENCED, MetadataError, MetadataUnavailable


def txn_error(code: int, api_version: int, fenced_since_version: int) -> ErrorCode:
    if code == PRODUCER_FENCED and api_version < fenced_since_version:
        code = INVALID_PRODUCER_EPOCH
    return to_error_code(code)


def txn_exception_code(exc: Exception) -> ErrorCode:
    """The code for an exception of a metadata call (others propagate to the server)."""
    if isinstance(exc, MetadataUnavailable):
        return ErrorCode.coordinator_not_available
    if isinstance(exc, MetadataError):
        return to_error_code(exc.error_code)
    raise exc
