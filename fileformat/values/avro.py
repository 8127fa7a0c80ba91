"""Avro: a reader schema's Arrow type, and payloads decoded by fastavro with Avro's schema
resolution (the writer schema of each record's id, the reader schema the query's).

Types: null -> null; boolean -> bool; int -> int32; long -> int64; float -> float32;
double -> float64; bytes, fixed -> binary; string, enum -> string; record -> struct;
array -> list; map -> map<string, _>; a union of null and one type -> that type
(nullable); a union of int and long -> int64, of float and double -> float64; other
unions have no Arrow form here (refused). Logical types: date -> date32;
timestamp-millis/-micros -> timestamp[us, UTC]; local-timestamp-millis/-micros ->
timestamp[us] (Spark's TIMESTAMP_NTZ); decimal -> decimal128(precision, scale) (precision
<= 38, Spark's limit). Every other logical type is read as its underlying type (time-millis
as int32 ms, time-micros as int64 us, uuid as string, duration as binary): the schema is
stripped of them before fastavro sees it, so fastavro returns plain values. A recursive
record has no Arrow form (refused).

Cost: fastavro's C reader decodes one record at a time into a Python dict (a Python object
per field: fastavro has no columnar output), which `rows.assemble` then converts to Arrow
in one `pa.array` call.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

import fastavro
import pyarrow as pa
from skiff.fileformat.values.model import AVRO, SchemaError, SchemaSource
from skiff.fileformat.values.rows import RowDecoder

PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
KEPT_LOGICAL = {
    ("int", "date"): pa.date32(),
    ("long", "timestamp-millis"): pa.timestamp("us", tz="UTC"),
    ("long", "timestamp-micros"): pa.timestamp("us", tz="UTC"),
    ("long", "local-timestamp-millis"): pa.timestamp("us"),
    ("long", "local-timestamp-micros"): pa.timestamp("us"),
}
MAX_DECIMAL_PRECISION = 38


def _strip(schema: Any) -> Any:
    """The schema without the logical types read as their underlying type."""
    if isinstance(schema, list):
        return [_strip(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strip(v) if k in ("type", "items", "values") else v for k, v in schema.items()}
    if "fields" in schema:
        out["fields"] = [{**f, "type": _strip(f.get("type"))} for f in schema["fields"]]
    logical = schema.get("logicalType")
    if logical is not None and (schema.get("type"), logical) not in KEPT_LOGICAL and logical != "decimal":
        del out["logicalType"]
    return out


def _load(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise SchemaError(f"{where}: not JSON ({exc})") from None


def parse(source: SchemaSource, where: str) -> tuple[Any, dict[str, Any]]:
    """fastavro's parsed schema and the named types it (and its references) define."""
    named: dict[str, Any] = {}
    try:
        for name, text in source.references:
            fastavro.parse_schema(_strip(_load(text, f"{where} reference {name}")), named_schemas=named)
        parsed = fastavro.parse_schema(_strip(_load(source.text, where)), named_schemas=named)
    except (fastavro.schema.SchemaParseException, fastavro.schema.UnknownType, ValueError, TypeError) as exc:
        raise SchemaError(f"{where}: not a valid Avro schema ({exc})") from None
    return parsed, named


def arrow_type(schema: Any, named: Mapping[str, Any], stack: tuple[str, ...] = ()) -> pa.DataType:
    """The Arrow type of a parsed Avro schema (module docstring)."""
    if isinstance(schema, str):
        if schema in PRIMITIVES:
            return PRIMITIVES[schema]
        if schema in stack:
            raise SchemaError(f"the recursive Avro type {schema} has no Arrow form")
        if schema not in named:
            raise SchemaError(f"unknown Avro type {schema}")
        return arrow_type(named[schema], named, stack)
    if isinstance(schema, list):
        return _union(schema, named, stack)
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return _decimal(schema)
    if (kind, logical) in KEPT_LOGICAL:
        return KEPT_LOGICAL[(kind, logical)]
    return _complex(schema, named, stack)


def _decimal(schema: Mapping[str, Any]) -> pa.DataType:
    precision, scale = int(schema.get("precision", 0)), int(schema.get("scale", 0))
    if not 0 < precision <= MAX_DECIMAL_PRECISION or not 0 <= scale <= precision:
        raise SchemaError(f"Avro decimal({precision}, {scale}) has no Spark form (precision 1..38)")
    return pa.decimal128(precision, scale)


def _complex(schema: Mapping[str, Any], named: Mapping[str, Any], stack: tuple[str, ...]) -> pa.DataType:
    kind = schema.get("type")
    if kind in ("record", "error"):
        name = schema["name"]
        if name in stack:
            raise SchemaError(f"the recursive Avro type {name} has no Arrow form")
        inner = (*stack, name)
        return pa.struct([pa.field(f["name"], arrow_type(f["type"], named, inner)) for f in schema["fields"]])
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    if kind == "array":
        return pa.list_(arrow_type(schema["items"], named, stack))
    if kind == "map":
        return pa.map_(pa.string(), arrow_type(schema["values"], named, stack))
    return arrow_type(kind, named, stack)


def _union(branches: list[Any], named: Mapping[str, Any], stack: tuple[str, ...]) -> pa.DataType:
    types = [arrow_type(b, named, stack) for b in branches if b != "null"]
    if not types:
        return pa.null()
    if all(t == types[0] for t in types):
        return types[0]
    if all(t in (pa.int32(), pa.int64()) for t in types):
        return pa.int64()
    if all(t in (pa.float32(), pa.float64()) for t in types):
        return pa.float64()
    raise SchemaError(
        f"the Avro union {json.dumps(branches)[:200]} has no Arrow form here (only a union of null"
        " and one type, of int and long, or of float and double)"
    )


class AvroDecoder(RowDecoder):
    def __init__(self, reader: SchemaSource, writers: Mapping[int, SchemaSource]) -> None:
        self.reader, named = parse(reader, "the reader schema")
        self.arrow_type = arrow_type(self.reader, named)
        prepared: dict[int, object] = {}
        for schema_id, source in writers.items():
            if source.schema_type != AVRO:
                prepared[schema_id] = f"schema id {schema_id} is a {source.schema_type} schema, not AVRO"
                continue
            try:
                parsed, _ = parse(source, f"writer schema {schema_id}")
            except SchemaError as exc:
                prepared[schema_id] = str(exc)
                continue
            # the reader's own schema needs no resolution (fastavro skips the matching work)
            same = source.text == reader.text and source.references == reader.references
            prepared[schema_id] = (parsed, None if same else self.reader)
        super().__init__(prepared)

    def decode_body(self, writer: Any, body: bytes, indexes: tuple[int, ...] | None) -> Any:
        writer_schema, reader_schema = writer
        stream = io.BytesIO(body)
        value = fastavro.schemaless_reader(stream, writer_schema, reader_schema)
        if stream.tell() != len(body):
            raise ValueError(f"{len(body) - stream.tell()} bytes left after the Avro value")
        return value
