"""Schema formats for the registry: parse, validate, canonicalise and check compatibility.

The pure logic under Skiff's Confluent-compatible schema registry, for the three schema types
Confluent Schema Registry has, each in its module:
- AVRO (avro_format, avro_compat): Apache `avro` parses; the compatibility walk is Avro's
  schema-resolution rules, reported as Confluent reports them;
- JSON (json_format, json_compat, json_objects, json_diff_text): `jsonschema` validates against
  the draft's metaschema, `referencing` resolves `$ref`; compatibility by Confluent's JSON
  Schema rules;
- PROTOBUF (protobuf_format, protobuf_compat): base64 FileDescriptorProto or .proto source
  (compiled by protoc through grpcio-tools); compatibility by Confluent's Protobuf rules.
The levels (which versions, which direction) are in `levels`. No I/O here but protoc's
private temporary files: the caller stores, serves and resolves references.

`parse_schema(type, text, references, normalize=)` -> ParsedSchema or InvalidSchema (42201);
`serialized_form(parsed, fmt)` -> the text GET /schemas/ids/{id}?format= answers;
`incompatibilities(level, new, previous)` -> Confluent's verbose messages, [] if compatible.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from skiff.metadata.schemas.formats import avro_compat, avro_format, json_compat, json_format, levels
from skiff.metadata.schemas.formats.levels import LEVELS
from skiff.metadata.schemas.formats.model import (
    MAX_REFERENCES,
    MAX_SCHEMA_CHARS,
    SCHEMA_TYPES,
    InvalidSchema,
    ParsedSchema,
)

__all__ = [
    "LEVELS",
    "SCHEMA_TYPES",
    "InvalidSchema",
    "ParsedSchema",
    "incompatibilities",
    "parse_schema",
    "serialized_form",
]


def parse_schema(
    schema_type: str, schema: str, references: Mapping[str, str] = {}, *, normalize: bool = False
) -> ParsedSchema:
    """Parse and validate `schema` of `schema_type`; InvalidSchema when it is not valid.

    references: reference name -> the referenced schema's text, the transitive closure in
    dependency order (AVRO: the full name of the type it defines; PROTOBUF: the import path;
    JSON: the $ref URL). canonical: the text as given (AVRO/JSON: compact JSON, key order
    kept), or with `normalize` Confluent's normalized form.
    """
    if schema_type not in SCHEMA_TYPES:
        raise InvalidSchema(f"Invalid schema type {schema_type!r}; one of {', '.join(SCHEMA_TYPES)}")
    if len(schema) > MAX_SCHEMA_CHARS or any(len(t) > MAX_SCHEMA_CHARS for t in references.values()):
        raise InvalidSchema(f"Invalid schema: longer than {MAX_SCHEMA_CHARS} characters")
    if len(references) > MAX_REFERENCES:
        raise InvalidSchema(f"Invalid schema: more than {MAX_REFERENCES} references")
    # One parse at a time: the parsers silence library warnings with warnings.catch_warnings,
    # which swaps process-wide state and is not thread-safe (the service parses in its threads).
    with _PARSE_LOCK:
        return _parse(schema_type, schema, references, normalize)


_PARSE_LOCK = threading.Lock()


def _parse(schema_type: str, schema: str, references: Mapping[str, str], normalize: bool) -> ParsedSchema:
    try:
        if schema_type == "AVRO":
            return avro_format.parse(schema, references, normalize)
        if schema_type == "JSON":
            return json_format.parse(schema, references, normalize)
        from skiff.metadata.schemas.formats import protobuf_format

        return protobuf_format.parse(schema, references, normalize)
    except RecursionError as e:
        raise InvalidSchema(f"Invalid {schema_type} schema: nested too deeply") from e


def serialized_form(parsed: ParsedSchema, fmt: str | None) -> str:
    """The schema text for GET /schemas/ids/{id}?format=fmt (the canonical text by default)."""
    if fmt == "serialized" and parsed.schema_type == "PROTOBUF":
        from skiff.metadata.schemas.formats import protobuf_format

        return protobuf_format.serialized(parsed.parsed)
    if fmt == "resolved" and parsed.schema_type == "AVRO":
        return avro_format.resolved(parsed.parsed)
    return parsed.canonical


def incompatibilities(level: str, new: ParsedSchema, previous: Sequence[ParsedSchema]) -> list[str]:
    """Why `new` breaks `level` against `previous` (live versions, oldest first); [] if it does not."""
    return levels.check_level(level, new, previous, _pair_check)


def _pair_check(
    reader: ParsedSchema, writer: ParsedSchema, reader_label: str, writer_label: str
) -> list[str]:
    if reader.schema_type == "AVRO":
        found = avro_compat.check(reader.parsed.schema, writer.parsed.schema)
        return [avro_compat.describe(item, reader_label, writer_label) for item in found]
    if reader.schema_type == "JSON":
        return json_compat.check(reader.parsed, writer.parsed, reader_label, writer_label)
    from skiff.metadata.schemas.formats import protobuf_compat

    return protobuf_compat.check(reader.parsed, writer.parsed, reader_label, writer_label)
