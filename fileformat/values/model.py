"""The values layer's shared types: a schema as the registry holds it, a decoded batch, and
the error raised for a schema that cannot be read (never for a payload: a payload that does
not decode is an error row).

A `SchemaSource` is one registered schema: its type (AVRO, JSON, PROTOBUF, Confluent's
names), its text (for PROTOBUF the base64 of a serialized `FileDescriptorProto`, the
registry's `format=serialized`), and the schemas it references as (name, text) pairs,
dependencies before dependents (Avro: schemas defining named types; Protobuf: the imported
files by import path).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

AVRO = "AVRO"
JSON = "JSON"
PROTOBUF = "PROTOBUF"
FORMATS = (AVRO, JSON, PROTOBUF)

# An error row's message is cut to this many characters (bounded output per row).
MAX_ERROR_CHARS = 300


class SchemaError(ValueError):
    """A schema cannot be read or has no Arrow form (the message says which part)."""


@dataclass(frozen=True)
class SchemaSource:
    schema_type: str
    text: str
    references: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Decoded:
    """One decoded batch: `values` (of the reader's Arrow type; null where the payload was
    null or did not decode) and `errors` (string; null where the row is fine)."""

    values: pa.Array
    errors: pa.StringArray

    @property
    def error_count(self) -> int:
        return len(self.errors) - int(self.errors.null_count)


def error_text(prefix: str, exc: BaseException | str) -> str:
    """One line, bounded: `prefix: message`."""
    text = f"{prefix}: {exc}".replace("\n", " ")
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."
