"""skiff.fileformat.values for PROTOBUF: every field type's Arrow form and values (scalars,
enums, messages, repeated, maps, Timestamp, wrappers, presence), Protobuf's evolution by field
number both ways, message indexes, and payloads that do not decode as error rows. Schemas are
compiled from .proto text by protoc (grpcio-tools) into descriptors, as the registry serves them
(`format=serialized`)."""

from __future__ import annotations

import base64
import datetime
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_tools import protoc
from skiff.fileformat.values import PROTOBUF, SchemaError, SchemaSource, build_decoder


def compile_proto(text: str, name: str = "schema.proto") -> list[descriptor_pb2.FileDescriptorProto]:
    """The file and its imports, compiled by protoc (dependencies first)."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, name).write_text(text)
        out = Path(tmp, "set.pb")
        include = str(Path(protoc.__file__).parent / "_proto")
        args = [
            "protoc",
            f"-I{tmp}",
            f"-I{include}",
            f"--descriptor_set_out={out}",
            "--include_imports",
            name,
        ]
        assert protoc.main(args) == 0, "protoc refused the schema"
        return list(descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file)


def source(text: str) -> SchemaSource:
    """What the registry serves: the file as base64, its non-well-known imports as references."""
    *deps, main = compile_proto(text)
    refs = tuple(
        (d.name, base64.b64encode(d.SerializeToString()).decode())
        for d in deps
        if not d.name.startswith("google/protobuf/")
    )
    return SchemaSource(PROTOBUF, base64.b64encode(main.SerializeToString()).decode(), refs)


def message_class(text: str, full_name: str) -> type:
    pool = descriptor_pool.DescriptorPool()
    for f in compile_proto(text):
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))


def frame(schema_id: int, body: bytes, indexes: bytes = b"\x00") -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + indexes + body


EVERY = """
syntax = "proto3";
package t;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
enum Color { RED = 0; GREEN = 1; }
message Inner { int64 x = 1; }
message Every {
  double d = 1; float f = 2; int32 i32 = 3; sint32 s32 = 4; sfixed32 sf32 = 5;
  uint32 u32 = 6; fixed32 f32 = 7; int64 i64 = 8; sint64 s64 = 9; sfixed64 sf64 = 10;
  uint64 u64 = 11; fixed64 f64 = 12; bool b = 13; string s = 14; bytes by = 15;
  Color color = 16; Inner inner = 17; repeated int32 nums = 18; repeated Inner inners = 19;
  map<string, int32> counts = 20; map<string, Inner> byname = 21;
  google.protobuf.Timestamp ts = 22; google.protobuf.StringValue wrapped = 23;
  optional int32 maybe = 24; repeated Color colors = 25;
  oneof choice { string text = 26; int64 number = 27; }
}
"""
INNER = pa.struct([("x", pa.int64())])
EVERY_ARROW = pa.struct(
    [
        ("d", pa.float64()),
        ("f", pa.float32()),
        ("i32", pa.int32()),
        ("s32", pa.int32()),
        ("sf32", pa.int32()),
        ("u32", pa.int64()),
        ("f32", pa.int64()),
        ("i64", pa.int64()),
        ("s64", pa.int64()),
        ("sf64", pa.int64()),
        ("u64", pa.int64()),
        ("f64", pa.int64()),
        ("b", pa.bool_()),
        ("s", pa.string()),
        ("by", pa.binary()),
        ("color", pa.string()),
        ("inner", INNER),
        ("nums", pa.list_(pa.int32())),
        ("inners", pa.list_(INNER)),
        ("counts", pa.map_(pa.string(), pa.int32())),
        ("byname", pa.map_(pa.string(), INNER)),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("wrapped", pa.string()),
        ("maybe", pa.int32()),
        ("colors", pa.list_(pa.string())),
        ("text", pa.string()),
        ("number", pa.int64()),
    ]
)


def test_every_type_maps_and_decodes() -> None:
    every = message_class(EVERY, "t.Every")
    msg = every(
        d=1.5,
        f=0.25,
        i32=-3,
        s32=-4,
        sf32=-5,
        u32=2**32 - 1,
        f32=7,
        i64=-(2**40),
        s64=9,
        sf64=-10,
        u64=11,
        f64=12,
        b=True,
        s="hé",
        by=b"\x00\x01",
        color=1,
        nums=[1, 2],
        counts={"a": 1},
        wrapped={"value": "w"},
        colors=[0, 1, 7],
        number=27,
    )
    msg.inner.x = 5
    msg.inners.add(x=1)
    msg.byname["k"].x = 2
    msg.ts.FromDatetime(datetime.datetime(2024, 1, 2, 3, 4, 5, 678901))
    empty = every()
    schema = source(EVERY)
    # the first message of the file is Inner: the reader message is named
    assert build_decoder(PROTOBUF, schema, {}).arrow_type == INNER
    decoder = build_decoder(PROTOBUF, schema, {4: schema}, protobuf_message="t.Every")
    assert decoder.arrow_type == EVERY_ARROW
    at = b"\x02\x02"  # message index [1]: Every
    decoded = decoder.decode(
        pa.array([frame(4, msg.SerializeToString(), at), frame(4, empty.SerializeToString(), at)])
    )
    assert decoded.error_count == 0
    full, blank = decoded.values.to_pylist()
    assert full == {
        "d": 1.5,
        "f": 0.25,
        "i32": -3,
        "s32": -4,
        "sf32": -5,
        "u32": 2**32 - 1,
        "f32": 7,
        "i64": -(2**40),
        "s64": 9,
        "sf64": -10,
        "u64": 11,
        "f64": 12,
        "b": True,
        "s": "hé",
        "by": b"\x00\x01",
        "color": "GREEN",
        "inner": {"x": 5},
        "nums": [1, 2],
        "inners": [{"x": 1}],
        "counts": [("a", 1)],
        "byname": [("k", {"x": 2})],
        "ts": datetime.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC),
        "wrapped": "w",
        "maybe": None,
        "colors": ["RED", "GREEN", "7"],
        "text": None,
        "number": 27,
    }
    # unset: scalars read their defaults, fields with presence are null
    assert blank["i32"] == 0 and blank["s"] == "" and blank["color"] == "RED"
    assert blank["inner"] is None and blank["ts"] is None and blank["wrapped"] is None
    assert blank["maybe"] is None and blank["text"] is None and blank["nums"] == []


V1 = 'syntax = "proto3"; package u; message User { string name = 1; }'
V2 = 'syntax = "proto3"; package u; message User { string name = 1; int32 age = 2; }'


def test_evolution_both_ways() -> None:
    old = message_class(V1, "u.User")(name="ann").SerializeToString()
    new = message_class(V2, "u.User")(name="bob", age=41).SerializeToString()
    payloads = pa.array([frame(1, old), frame(2, new)])
    writers = {1: source(V1), 2: source(V2)}
    v2 = build_decoder(PROTOBUF, source(V2), writers).decode(payloads)
    assert v2.values.to_pylist() == [{"name": "ann", "age": 0}, {"name": "bob", "age": 41}]
    v1 = build_decoder(PROTOBUF, source(V1), writers).decode(payloads)
    assert v1.values.to_pylist() == [{"name": "ann"}, {"name": "bob"}]


TWO = 'syntax = "proto3"; package m; message A { string a = 1; message N { int32 n = 1; } } message B { int32 b = 1; }'


def test_message_indexes_name_the_message() -> None:
    schema = source(TWO)
    body = message_class(TWO, "m.A")(a="x").SerializeToString()
    other = message_class(TWO, "m.B")(b=1).SerializeToString()
    nested = message_class(TWO, "m.A.N")(n=1).SerializeToString()
    payloads = pa.array(
        [
            frame(3, body),  # the common [0] as one byte
            frame(3, body, b"\x02\x00"),  # [0] spelled out: count 1, index 0 (zigzag)
            frame(3, other, b"\x02\x02"),  # [1]: message B, not the reader's
            frame(3, nested, b"\x04\x00\x00"),  # [0, 0]: A.N
            frame(3, body, b"\x02\x0a"),  # [5]: no such message
            frame(3, b"", b"\x02"),  # the count promises an index that is not there
        ]
    )
    decoded = build_decoder(PROTOBUF, schema, {3: schema}).decode(payloads)
    assert decoded.values.to_pylist()[:2] == [{"a": "x"}, {"a": "x"}]
    errors = decoded.errors.to_pylist()
    assert errors[:2] == [None, None]
    assert "the record is a m.B" in errors[2]
    assert "the record is a m.A.N" in errors[3]
    assert "no message at index path [5]" in errors[4]
    assert "wire format" in errors[5]


def test_bad_payloads_are_error_rows() -> None:
    schema = source(V2)
    good = message_class(V2, "u.User")(name="bob", age=41).SerializeToString()
    payloads = pa.array(
        [frame(1, good), frame(1, b"\xff\xff\xff"), b"raw", frame(9, good), frame(2, good), None]
    )
    writers = {1: schema, 2: SchemaSource("AVRO", '"string"')}
    decoded = build_decoder(PROTOBUF, schema, writers).decode(payloads)
    assert decoded.values.to_pylist() == [{"name": "bob", "age": 41}] + [None] * 5
    errors = decoded.errors.to_pylist()
    assert errors[0] is None and errors[5] is None
    assert errors[1].startswith("schema id 1: DecodeError")
    assert "wire format" in errors[2]
    assert errors[3] == "schema id 9 is not one of the subject's schemas"
    assert errors[4] == "schema id 2 is a AVRO schema, not PROTOBUF"


def test_references_and_refusals() -> None:
    # an import registered as a reference
    dep = 'syntax = "proto3"; package d; message Money { int64 cents = 1; }'
    main_text = 'syntax = "proto3"; package p; import "money.proto"; message Order { d.Money price = 1; }'
    money = compile_proto(dep, "money.proto")[-1]
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "money.proto").write_text(dep)
        Path(tmp, "order.proto").write_text(main_text)
        out = Path(tmp, "set.pb")
        assert protoc.main(["protoc", f"-I{tmp}", f"--descriptor_set_out={out}", "order.proto"]) == 0
        (order,) = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    b64 = lambda f: base64.b64encode(f.SerializeToString()).decode()  # noqa: E731
    schema = SchemaSource(PROTOBUF, b64(order), (("money.proto", b64(money)),))
    decoder = build_decoder(PROTOBUF, schema, {1: schema})
    assert decoder.arrow_type == pa.struct([("price", pa.struct([("cents", pa.int64())]))])
    with pytest.raises(SchemaError, match="neither a reference nor well-known"):
        build_decoder(PROTOBUF, SchemaSource(PROTOBUF, b64(order)), {})
    recursive = source('syntax = "proto3"; message Node { Node next = 1; }')
    with pytest.raises(SchemaError, match="recursive"):
        build_decoder(PROTOBUF, recursive, {})
    with pytest.raises(SchemaError, match="no message d.Nope"):
        build_decoder(PROTOBUF, schema, {}, protobuf_message="d.Nope")
    with pytest.raises(SchemaError, match="base64 FileDescriptorProto"):
        build_decoder(PROTOBUF, SchemaSource(PROTOBUF, 'syntax = "proto3";'), {})
