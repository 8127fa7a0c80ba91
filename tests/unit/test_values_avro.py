"""skiff.fileformat.values for AVRO: every type's Arrow form and values, Avro's schema
resolution across two versions (a field added with a default, read with either version as the
reader), and payloads that do not decode as error rows (never an exception)."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import uuid

import fastavro
import pyarrow as pa
import pytest
from skiff.fileformat.values import AVRO, SchemaError, SchemaSource, build_decoder


def frame(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + body


def avro_body(schema: dict | str, value: object) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def src(schema: object) -> SchemaSource:
    return SchemaSource(AVRO, json.dumps(schema))


USER_V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
USER_V2 = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int", "default": 0}],
}

EVERY_TYPE = {
    "type": "record",
    "name": "Every",
    "namespace": "t",
    "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "by", "type": "bytes"},
        {"name": "s", "type": "string"},
        {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "e2", "type": "Color"},
        {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "arr", "type": {"type": "array", "items": "int"}},
        {"name": "m", "type": {"type": "map", "values": "string"}},
        {
            "name": "rec",
            "type": {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "long"}]},
        },
        {"name": "opt", "type": ["null", "string"], "default": None},
        {"name": "optrec", "type": ["null", "Inner"], "default": None},
        {"name": "num", "type": ["int", "long"]},
        {"name": "date", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tus", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {
            "name": "decfx",
            "type": {
                "type": "fixed",
                "name": "D8",
                "size": 8,
                "logicalType": "decimal",
                "precision": 12,
                "scale": 3,
            },
        },
        {"name": "time", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
    ],
}
EVERY_ARROW = pa.struct(
    [
        ("b", pa.bool_()),
        ("i", pa.int32()),
        ("l", pa.int64()),
        ("f", pa.float32()),
        ("d", pa.float64()),
        ("by", pa.binary()),
        ("s", pa.string()),
        ("e", pa.string()),
        ("e2", pa.string()),
        ("fx", pa.binary()),
        ("arr", pa.list_(pa.int32())),
        ("m", pa.map_(pa.string(), pa.string())),
        ("rec", pa.struct([("x", pa.int64())])),
        ("opt", pa.string()),
        ("optrec", pa.struct([("x", pa.int64())])),
        ("num", pa.int64()),
        ("date", pa.date32()),
        ("tms", pa.timestamp("us", tz="UTC")),
        ("tus", pa.timestamp("us", tz="UTC")),
        ("local", pa.timestamp("us")),
        ("dec", pa.decimal128(9, 2)),
        ("decfx", pa.decimal128(12, 3)),
        ("time", pa.int32()),
        ("uid", pa.string()),
    ]
)


def test_every_type_maps_and_decodes() -> None:
    utc = datetime.UTC
    uid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    value = {
        "b": True,
        "i": -7,
        "l": 2**40,
        "f": 1.5,
        "d": 2.25,
        "by": b"\x00\xff",
        "s": "héllo",
        "e": "GREEN",
        "e2": "RED",
        "fx": b"abcd",
        "arr": [1, 2, 3],
        "m": {"k": "v"},
        "rec": {"x": 9},
        "opt": None,
        "optrec": {"x": 3},
        "num": 5,
        "date": datetime.date(2024, 2, 29),
        "tms": datetime.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=utc),
        "tus": datetime.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=utc),
        "local": datetime.datetime(2024, 1, 2, 3, 4, 5, 678000),
        "dec": decimal.Decimal("1234.56"),
        "decfx": decimal.Decimal("-9.125"),
        "time": datetime.time(1, 2, 3, 4000),
        "uid": uid,
    }
    decoder = build_decoder(AVRO, src(EVERY_TYPE), {3: src(EVERY_TYPE)})
    assert decoder.arrow_type == EVERY_ARROW
    decoded = decoder.decode(pa.array([frame(3, avro_body(EVERY_TYPE, value))], pa.binary()))
    assert decoded.error_count == 0
    (row,) = decoded.values.to_pylist()
    expected = dict(value, m=[("k", "v")], time=3_723_004, uid=str(uid))
    assert row == expected


def test_top_level_primitive_schema() -> None:
    decoder = build_decoder(AVRO, SchemaSource(AVRO, '"string"'), {1: SchemaSource(AVRO, '"string"')})
    assert decoder.arrow_type == pa.string()
    decoded = decoder.decode(pa.array([frame(1, avro_body("string", "k1")), None]))
    assert decoded.values.to_pylist() == ["k1", None]
    assert decoded.errors.to_pylist() == [None, None]


def test_evolution_both_ways() -> None:
    payloads = pa.array(
        [
            frame(1, avro_body(USER_V1, {"name": "ann"})),
            frame(2, avro_body(USER_V2, {"name": "bob", "age": 41})),
        ]
    )
    writers = {1: src(USER_V1), 2: src(USER_V2)}
    # v2 reader: the v1 record gets the default
    v2 = build_decoder(AVRO, src(USER_V2), writers).decode(payloads)
    assert v2.values.to_pylist() == [{"name": "ann", "age": 0}, {"name": "bob", "age": 41}]
    assert v2.error_count == 0
    # v1 reader: the v2 record's new field is dropped
    v1 = build_decoder(AVRO, src(USER_V1), writers).decode(payloads)
    assert v1.values.to_pylist() == [{"name": "ann"}, {"name": "bob"}]
    assert v1.values.type == pa.struct([("name", pa.string())])


def test_bad_payloads_are_error_rows() -> None:
    good = frame(1, avro_body(USER_V1, {"name": "ann"}))
    incompatible = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "int"}]}
    payloads = pa.array(
        [
            good,
            None,  # a tombstone: null, not an error
            b"plain text",  # not in the wire format
            b"\x00\x00",  # too short for a header
            frame(99, b"\x06ann"),  # unknown id
            good[:-2],  # truncated body
            good + b"\x00\x00",  # bytes after the value
            frame(5, avro_body(incompatible, {"name": 3})),  # a writer the reader cannot resolve
            frame(6, b"\x02"),  # a writer schema that cannot be read
            frame(7, b"{}"),  # a JSON schema id
        ]
    )
    writers = {
        1: src(USER_V1),
        5: src(incompatible),
        6: SchemaSource(AVRO, "{nope"),
        7: SchemaSource("JSON", "{}"),
    }
    decoded = build_decoder(AVRO, src(USER_V2), writers).decode(payloads)
    assert decoded.values.to_pylist() == [{"name": "ann", "age": 0}] + [None] * 9
    errors = decoded.errors.to_pylist()
    assert errors[0] is None and errors[1] is None
    assert "wire format" in errors[2] and "wire format" in errors[3]
    assert errors[4] == "schema id 99 is not one of the subject's schemas"
    assert errors[5].startswith("schema id 1: ")
    assert "bytes left after the Avro value" in errors[6]
    assert errors[7].startswith("schema id 5: ")
    assert "writer schema 6: not JSON" in errors[8]
    assert errors[9] == "schema id 7 is a JSON schema, not AVRO"
    assert all(len(e) <= 300 for e in errors if e)


def test_references_define_named_types() -> None:
    address = {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}
    person = {"type": "record", "name": "Person", "fields": [{"name": "home", "type": "Address"}]}
    source = SchemaSource(AVRO, json.dumps(person), (("Address", json.dumps(address)),))
    schema = fastavro.parse_schema(person, named_schemas={"Address": fastavro.parse_schema(address)})
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, {"home": {"city": "Oslo"}})
    decoded = build_decoder(AVRO, source, {4: source}).decode(pa.array([frame(4, out.getvalue())]))
    assert decoded.values.to_pylist() == [{"home": {"city": "Oslo"}}]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]},
            "recursive",
        ),
        ({"type": "record", "name": "U", "fields": [{"name": "x", "type": ["string", "int"]}]}, "union"),
        (
            {
                "type": "record",
                "name": "U",
                "fields": [
                    {"name": "x", "type": {"type": "bytes", "logicalType": "decimal", "precision": 40}}
                ],
            },
            "decimal",
        ),
    ],
)
def test_schemas_without_an_arrow_form_are_refused(schema: dict, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        build_decoder(AVRO, src(schema), {})


def test_unreadable_reader_schema_is_refused() -> None:
    with pytest.raises(SchemaError, match="reader schema"):
        build_decoder(AVRO, SchemaSource(AVRO, '{"type": "nosuch"}'), {})
