"""Typed values: Kafka record payloads in Confluent's wire format decoded into Arrow.

    decoder = build_decoder("AVRO", reader, {7: writer_v1, 9: writer_v2})
    decoded = decoder.decode(payloads)        # payloads: a pyarrow binary array
    decoded.values                            # the reader schema's Arrow type (a struct for a record)
    decoded.errors                            # string: why a row did not decode, else null

Given the payloads (magic byte 0, the 4-byte big-endian schema id, for PROTOBUF the message
indexes, then the body; `wire`), the writer schemas by id and one reader schema (each a
`SchemaSource`: type, text, references), a batch decodes into one Arrow array of the reader
schema's type and one error column. AVRO resolves each record from its writer schema to the
reader schema (Avro's schema evolution, `avro`); JSON reads every payload into the reader
schema (`jsonschema`); PROTOBUF parses with the reader message (field numbers: Protobuf's
own evolution, `protobuf`). Each module's docstring gives its type mapping and where it
cannot avoid a Python object per field.

Bounded and total: a payload that is null stays null (no error); one that is not framed,
names an id not among the writers, or does not decode (or does not fit the reader type) is
one error row with a one-line message, never an exception. Only a reader schema that
cannot be read or has no Arrow form raises `SchemaError` (at `build_decoder`); a writer
schema that cannot be read makes its records error rows.

This package is pure (no I/O) and imports nothing of the project outside
`skiff.fileformat`: the Spark executors use it, and so can any other reader of the topics'
files.
"""

from __future__ import annotations

from collections.abc import Mapping

from skiff.fileformat.values.model import (
    AVRO,
    FORMATS,
    JSON,
    PROTOBUF,
    Decoded,
    SchemaError,
    SchemaSource,
)
from skiff.fileformat.values.rows import RowDecoder

__all__ = [
    "AVRO",
    "FORMATS",
    "JSON",
    "PROTOBUF",
    "Decoded",
    "RowDecoder",
    "SchemaError",
    "SchemaSource",
    "build_decoder",
]


def build_decoder(
    schema_type: str,
    reader: SchemaSource,
    writers: Mapping[int, SchemaSource],
    *,
    protobuf_message: str | None = None,
) -> RowDecoder:
    """The decoder of one format (AVRO, JSON, PROTOBUF) for this reader and these writers;
    `protobuf_message`: the reader message's full name (default: the file's first message)."""
    if reader.schema_type != schema_type:
        raise SchemaError(f"the reader schema is a {reader.schema_type} schema, not {schema_type}")
    if schema_type == AVRO:
        from skiff.fileformat.values.avro import AvroDecoder

        return AvroDecoder(reader, writers)
    if schema_type == JSON:
        from skiff.fileformat.values.jsonschema import JsonDecoder

        return JsonDecoder(reader, writers)
    if schema_type == PROTOBUF:
        from skiff.fileformat.values.protobuf import ProtobufDecoder

        return ProtobufDecoder(reader, writers, protobuf_message)
    raise SchemaError(f"unknown schema type {schema_type!r} (one of {', '.join(FORMATS)})")
