"""skiff.fileformat.values for JSON: every JSON Schema form's Arrow type, payloads read into
it on the vectorised path (Arrow's JSON reader) and the per-row path giving the same values,
and payloads that do not decode or do not fit the schema as error rows."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from skiff.fileformat.values import JSON, SchemaError, SchemaSource, build_decoder
from skiff.fileformat.values.jsonschema import arrow_type


def frame(schema_id: int, body: bytes | str) -> bytes:
    raw = body.encode() if isinstance(body, str) else body
    return b"\x00" + schema_id.to_bytes(4, "big") + raw


def src(schema: object) -> SchemaSource:
    return SchemaSource(JSON, json.dumps(schema))


USER = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": ["integer", "null"]},
        "score": {"type": "number"},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {"$ref": "#/definitions/Address"},
        "nick": {"oneOf": [{"type": "null"}, {"type": "string"}]},
        "color": {"enum": ["red", "green"]},
    },
    "definitions": {"Address": {"type": "object", "properties": {"city": {"type": "string"}}}},
}
USER_ARROW = pa.struct(
    [
        ("name", pa.string()),
        ("age", pa.int64()),
        ("score", pa.float64()),
        ("ok", pa.bool_()),
        ("tags", pa.list_(pa.string())),
        ("address", pa.struct([("city", pa.string())])),
        ("nick", pa.string()),
        ("color", pa.string()),
    ]
)


def test_type_mapping() -> None:
    assert arrow_type(USER, USER) == USER_ARROW
    with_map = {"type": "object", "additionalProperties": {"type": "integer"}}
    assert arrow_type(with_map, with_map) == pa.map_(pa.string(), pa.int64())
    assert arrow_type({"type": "string", "format": "date-time"}, {}) == pa.string()
    defs = {"$defs": {"X": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/$defs/X"}}
    assert arrow_type(defs, defs) == pa.list_(pa.int64())


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": ["string", "integer"]}, "one non-null type"),
        ({"type": "object"}, "properties"),
        ({"type": "array"}, "items"),
        ({"$ref": "other.json#/X"}, "outside"),
        (
            {
                "definitions": {"N": {"type": "object", "properties": {"n": {"$ref": "#/definitions/N"}}}},
                "$ref": "#/definitions/N",
            },
            "recursive",
        ),
        ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, "several"),
    ],
)
def test_schemas_without_an_arrow_form_are_refused(schema: dict, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        build_decoder(JSON, src(schema), {})


ROWS = [
    {
        "name": "ann",
        "age": 41,
        "score": 2,
        "ok": True,
        "tags": ["a", "b"],
        "address": {"city": "Oslo"},
        "nick": None,
        "color": "red",
        "unknown": {"ignored": 1},
    },
    {"name": "bob"},
]
EXPECTED = [
    {
        "name": "ann",
        "age": 41,
        "score": 2.0,
        "ok": True,
        "tags": ["a", "b"],
        "address": {"city": "Oslo"},
        "nick": None,
        "color": "red",
    },
    dict.fromkeys(USER_ARROW.names) | {"name": "bob"},
]


def test_vectorised_and_row_paths_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    decoder = build_decoder(JSON, src(USER), {1: src(USER)})
    row_decodes: list[bytes] = []
    by_row = decoder.decode_body
    monkeypatch.setattr(
        decoder, "decode_body", lambda w, body, i: row_decodes.append(body) or by_row(w, body, i)
    )
    compact = pa.array([frame(1, json.dumps(r)) for r in ROWS])
    # leading whitespace: the per-row path
    padded = pa.array([frame(1, "\n " + json.dumps(r, indent=2)) for r in ROWS])
    for payloads, per_row in ((compact, 0), (padded, 2)):
        row_decodes.clear()
        decoded = decoder.decode(payloads)
        assert decoded.values.to_pylist() == EXPECTED
        assert decoded.error_count == 0
        assert len(row_decodes) == per_row
    # a body with newline whitespace inside stays on the vectorised path (newlines -> spaces)
    assert (
        decoder.decode(pa.array([frame(1, json.dumps(ROWS[0], indent=1))])).values.to_pylist() == EXPECTED[:1]
    )


def test_bad_payloads_are_error_rows_in_a_mixed_batch() -> None:
    decoder = build_decoder(JSON, src(USER), {1: src(USER), 2: SchemaSource("AVRO", '"string"')})
    payloads = pa.array(
        [
            frame(1, json.dumps(ROWS[0])),
            b'{"name": "raw, no framing"}',
            None,
            frame(1, '{"name": "x", "age": "forty"}'),  # does not fit the schema
            frame(1, '{"name": '),  # not JSON
            frame(7, "{}"),  # unknown id
            frame(2, "{}"),  # an Avro schema id
            frame(1, "[1, 2]"),  # not an object
            frame(1, json.dumps(ROWS[1])),
        ]
    )
    decoded = decoder.decode(payloads)
    values = decoded.values.to_pylist()
    assert values[0] == EXPECTED[0] and values[8] == EXPECTED[1]
    assert values[1:8] == [None] * 7
    errors = decoded.errors.to_pylist()
    assert errors[0] is None and errors[2] is None and errors[8] is None
    assert "wire format" in errors[1]
    assert errors[3].startswith("does not fit the reader schema")
    assert errors[4].startswith("schema id 1: JSONDecodeError")
    assert errors[5] == "schema id 7 is not one of the subject's schemas"
    assert errors[6] == "schema id 2 is a AVRO schema, not JSON"
    assert errors[7].startswith("does not fit the reader schema")


def test_maps_and_top_level_scalars_take_the_row_path() -> None:
    schema = {
        "type": "object",
        "properties": {"m": {"type": "object", "additionalProperties": {"type": "integer"}}},
    }
    decoder = build_decoder(JSON, src(schema), {1: src(schema)})
    decoded = decoder.decode(pa.array([frame(1, '{"m": {"a": 1}}')]))
    assert decoded.values.to_pylist() == [{"m": [("a", 1)]}]
    scalar = build_decoder(JSON, src({"type": "integer"}), {1: src({"type": "integer"})})
    assert scalar.decode(pa.array([frame(1, "5"), frame(1, '"x"')])).values.to_pylist() == [5, None]
