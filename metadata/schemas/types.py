"""The schema registry's values, as they cross the metadata service's boundary.

Confluent's model: a *schema* (type, text, references) has one global id, the same for every
subject that registers the identical schema; a *subject* holds numbered *versions*, each one
schema id; a version is soft-deleted (hidden, kept) before it can be hard-deleted. A
*reference* names another subject's version whose schema this one uses (an Avro named type, a
Protobuf import, a JSON Schema `$ref`). Compatibility levels and modes are set globally or per
subject (`SchemaSettings`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from annotated_types import Interval, Len, MaxLen

# Confluent's limits are looser; these bound what one request may carry.
MAX_SCHEMA_CHARS = 1024 * 1024
MAX_REFERENCES = 1_000
MAX_SUBJECT_CHARS = 1024

SchemaText = Annotated[str, MaxLen(MAX_SCHEMA_CHARS)]
Subject = Annotated[str, Len(1, MAX_SUBJECT_CHARS)]
# A version: 1.. ; -1 is "latest" where a version is asked for (Confluent's `latest`).
Version = Annotated[int, Interval(ge=-1, le=2**31 - 1)]
SchemaId = Annotated[int, Interval(ge=1, le=2**31 - 1)]

AVRO = "AVRO"
JSON = "JSON"
PROTOBUF = "PROTOBUF"
LATEST = -1

READWRITE = "READWRITE"
READONLY = "READONLY"
IMPORT = "IMPORT"
MODES = (READWRITE, READONLY, IMPORT)
DEFAULT_COMPATIBILITY = "BACKWARD"


@dataclass(frozen=True)
class SchemaReference:
    name: Annotated[str, MaxLen(MAX_SUBJECT_CHARS)]
    subject: Subject
    version: Version


@dataclass(frozen=True)
class SchemaSpec:
    """A schema as a client registers or looks it up."""

    schema: SchemaText
    schema_type: Annotated[str, MaxLen(16)] = AVRO
    references: Annotated[tuple[SchemaReference, ...], MaxLen(MAX_REFERENCES)] = ()


@dataclass(frozen=True)
class StoredSchema:
    """A schema by its global id."""

    id: int
    schema_type: str
    schema: str
    references: tuple[SchemaReference, ...] = ()


@dataclass(frozen=True)
class RegisteredSchema:
    """One version of a subject."""

    subject: str
    version: int
    id: int
    schema_type: str
    schema: str
    references: tuple[SchemaReference, ...] = ()
    deleted: bool = False


@dataclass(frozen=True)
class SchemaSettings:
    """A compatibility level and a mode, global (`subject` None) or a subject's; None fields are
    not set at that scope (the global default applies)."""

    subject: str | None
    compatibility: str | None = None
    normalize: bool | None = None
    mode: str | None = None


MAX_VERSION = 2**31 - 1


def version_from_text(text: str) -> int | None:
    """A version as Confluent's paths and CLI write it: `latest` or -1 (LATEST), or 1 ..
    2^31-1; None when `text` is none of these (each caller words its own refusal)."""
    if text == "latest":
        return LATEST
    try:
        v = int(text)
    except ValueError:
        return None
    return v if v == LATEST or 1 <= v <= MAX_VERSION else None
