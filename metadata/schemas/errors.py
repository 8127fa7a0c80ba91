"""The schema registry's errors, with Confluent Schema Registry's error codes and messages.

Confluent's codes carry the HTTP status in their first three digits (40401 is a 404, 42201 a
422); 409 (incompatible schema) and 422 are codes by themselves. The metadata service answers
them as `{"error_code", "message"}`, the shape Confluent's clients parse, on every route (the
`/v1/schemas/...` operations and the Confluent REST routes alike).
"""

from __future__ import annotations

from skiff.metadata.errors import MetadataError

SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
VERSION_SOFT_DELETED = 40406
VERSION_NOT_SOFT_DELETED = 40407
SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED = 40408
SUBJECT_LEVEL_MODE_NOT_CONFIGURED = 40409
INCOMPATIBLE_SCHEMA = 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_MODE = 42204
OPERATION_NOT_PERMITTED = 42205
REFERENCE_EXISTS = 42206
ID_CONFLICT = 42207
STORE_ERROR = 50001


class RegistryError(MetadataError):
    """A refusal with a Confluent error code (`error_code`) and its HTTP status."""

    @property
    def http_status(self) -> int:
        code = self.error_code
        return code if code < 1000 else code // 100
