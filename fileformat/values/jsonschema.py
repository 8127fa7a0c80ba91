"""JSON Schema: a reader schema's Arrow type, and JSON payloads read into it.

Types: object with properties -> struct (property order); object with only
`additionalProperties: <schema>` -> map<string, _>; array with `items` -> list; string ->
string (formats such as date-time stay strings); integer -> int64; number -> float64;
boolean -> bool; null -> null; `enum` of strings without a type -> string. Nullable forms
read as their non-null type: `type: [x, "null"]`, `oneOf`/`anyOf` of one schema and
`{"type": "null"}`. `$ref` to a place in the same document (`#/definitions/X`,
`#/$defs/X`) is followed; a recursive or external `$ref`, several non-null types, and an
object with neither properties nor additionalProperties have no Arrow form here (refused).
A property the schema does not name is ignored; a value of another type than the schema's
(a string where it says integer) makes the row an error row.

JSON has no schema resolution: the writer's schema id must be one of the subject's JSON
schemas, and every payload is read with the reader schema.

Decoding, vectorised where Arrow allows: when the reader type is a struct without maps,
the bodies that look like one JSON object each (first byte `{`, last `}`) are joined into
newline-delimited JSON (newline bytes inside a body can only be whitespace in valid JSON, so
they become spaces) and parsed by Arrow's JSON reader into columns, no Python object per
field. If Arrow refuses the block (a value of the wrong type, a malformed body) or the row
count differs, the batch falls back to `json.loads` per payload and `rows.assemble`, which
finds the bad rows; bodies that do not look like one object always take that path.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
from skiff.fileformat.values import wire
from skiff.fileformat.values.model import JSON, Decoded, SchemaError, SchemaSource
from skiff.fileformat.values.rows import RowDecoder, assemble

SCALARS: dict[str, pa.DataType] = {
    "string": pa.string(),
    "integer": pa.int64(),
    "number": pa.float64(),
    "boolean": pa.bool_(),
    "null": pa.null(),
}
MAX_DEPTH = 64


def _resolve(ref: str, root: Any) -> Any:
    if not ref.startswith("#"):
        raise SchemaError(f"the JSON Schema $ref {ref!r} points outside the schema (not supported)")
    node = root
    for part in [p for p in ref[1:].split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            raise SchemaError(f"the JSON Schema $ref {ref!r} points nowhere")
        node = node[part]
    return node


def _non_null(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The one non-null branch of a nullable oneOf/anyOf, else None."""
    for key in ("oneOf", "anyOf"):
        branches = schema.get(key)
        if isinstance(branches, list):
            rest = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
            if len(rest) == 1 and isinstance(rest[0], dict):
                return rest[0]
            raise SchemaError(f"JSON Schema {key} of several non-null schemas has no Arrow form here")
    return None


def arrow_type(schema: Any, root: Any, refs: tuple[str, ...] = ()) -> pa.DataType:
    if not isinstance(schema, dict):
        raise SchemaError(f"the JSON Schema {json.dumps(schema)[:100]} has no Arrow form here")
    if len(refs) > MAX_DEPTH:
        raise SchemaError("the JSON Schema nests too deep")
    if "$ref" in schema:
        ref = schema["$ref"]
        if ref in refs:
            raise SchemaError(f"the recursive JSON Schema $ref {ref!r} has no Arrow form")
        return arrow_type(_resolve(ref, root), root, (*refs, ref))
    branch = _non_null(schema)
    if branch is not None:
        return arrow_type(branch, root, (*refs, ""))
    kind = _kind(schema)
    if kind in SCALARS:
        return SCALARS[kind]
    return _container(kind, schema, root, (*refs, ""))


def _container(kind: Any, schema: dict[str, Any], root: Any, inner: tuple[str, ...]) -> pa.DataType:
    if kind == "array":
        if not isinstance(schema.get("items"), dict):
            raise SchemaError("a JSON Schema array needs one `items` schema to have an Arrow form")
        return pa.list_(arrow_type(schema["items"], root, inner))
    if kind == "object":
        props = schema.get("properties")
        if isinstance(props, dict) and props:
            return pa.struct([pa.field(str(n), arrow_type(s, root, inner)) for n, s in props.items()])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return pa.map_(pa.string(), arrow_type(extra, root, inner))
        raise SchemaError("a JSON Schema object needs properties or an additionalProperties schema")
    raise SchemaError(f"JSON Schema type {kind!r} has no Arrow form here")


def _kind(schema: dict[str, Any]) -> Any:
    """The one non-null type the schema names (or implies by properties / a string enum)."""
    kind = schema.get("type")
    if isinstance(kind, list):
        rest = [k for k in kind if k != "null"]
        if len(rest) != 1:
            raise SchemaError(f"JSON Schema type {kind} has no Arrow form here (one non-null type only)")
        kind = rest[0]
    if kind is None and "properties" in schema:
        kind = "object"
    enum = schema.get("enum")
    if kind is None and isinstance(enum, list) and all(isinstance(e, str) for e in enum):
        kind = "string"
    return kind


def _has_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_map(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t):
        return _has_map(t.value_type)
    return bool(pa.types.is_null(t))


class JsonDecoder(RowDecoder):
    def __init__(self, reader: SchemaSource, writers: Mapping[int, SchemaSource]) -> None:
        try:
            root = json.loads(reader.text)
        except ValueError as exc:
            raise SchemaError(f"the reader schema: not JSON ({exc})") from None
        self.arrow_type = arrow_type(root, root)
        prepared: dict[int, object] = {
            i: True if s.schema_type == JSON else f"schema id {i} is a {s.schema_type} schema, not JSON"
            for i, s in writers.items()
        }
        super().__init__(prepared)
        self.good_ids = np.array([i for i, w in prepared.items() if w is True], dtype=np.int64)
        self.vectorised = pa.types.is_struct(self.arrow_type) and not _has_map(self.arrow_type)

    def decode_body(self, writer: Any, body: bytes, indexes: tuple[int, ...] | None) -> Any:
        return json.loads(body)

    def decode(self, payloads: pa.Array) -> Decoded:
        if not self.vectorised:
            return super().decode(payloads)
        frames = wire.frame_batch(payloads)
        raw = np.frombuffer(frames.data, dtype=np.uint8)
        starts, ends = frames.body_start, frames.body_end
        cand = np.isin(frames.schema_id, self.good_ids) & (ends - starts >= 2)
        if cand.any():
            cand &= (raw[np.where(cand, starts, 0)] == ord("{")) & (
                raw[np.where(cand, ends - 1, 0)] == ord("}")
            )
        idx = np.flatnonzero(cand)
        fast = self._read_ndjson(raw, starts[idx], ends[idx]) if len(idx) else None
        if fast is None:
            return super().decode(payloads)
        n = len(payloads)
        frames.schema_id[idx] = wire.NULL  # the Python loop skips them: decoded already
        rows: list[Any] = [None] * n
        errors: list[str | None] = [None] * n
        self.decode_rows(frames, rows, errors)
        slow = assemble(rows, errors, self.arrow_type)
        if not len(idx) < n:
            return Decoded(fast, slow.errors)
        positions = np.zeros(n, dtype=np.int64)
        positions[idx] = np.arange(len(idx))
        spread = fast.take(pa.array(positions, mask=~cand))
        return Decoded(pc.if_else(pa.array(cand), spread, slow.values), slow.errors)

    def _read_ndjson(self, raw: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Array | None:
        lengths = ends - starts
        total = int(lengths.sum())
        before = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], out=before[1:])
        gather = np.arange(total, dtype=np.int64) - np.repeat(before - starts, lengths)
        body = raw[gather]
        body[(body == 10) | (body == 13)] = 32
        out = np.full(total + len(lengths), 10, dtype=np.uint8)
        out[np.arange(total, dtype=np.int64) + np.repeat(np.arange(len(lengths)), lengths)] = body
        struct = self.arrow_type
        try:
            table = pa_json.read_json(
                io.BytesIO(out.tobytes()),
                read_options=pa_json.ReadOptions(use_threads=False, block_size=max(len(out) + 1, 1 << 16)),
                parse_options=pa_json.ParseOptions(
                    explicit_schema=pa.schema(list(struct)), unexpected_field_behavior="ignore"
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return None
        if table.num_rows != len(lengths):
            return None
        columns = [table.column(f.name).combine_chunks() for f in struct]
        return pa.StructArray.from_arrays(columns, fields=list(struct))
