"""Protobuf schemas in the registry (metadata.schemas.formats): .proto source compiled by
protoc, the base64 FileDescriptorProto that confluent-kafka's ProtobufSerializer registers,
imports as references, and Confluent's Protobuf compatibility rules in both directions."""

from __future__ import annotations

import base64

import pytest
from confluent_kafka.schema_registry.common.protobuf import _schema_to_str
from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2
from skiff.metadata.schemas.formats import InvalidSchema, incompatibilities, parse_schema, serialized_form

BASE = """
syntax = "proto3";
package shop;
message Order {
  int64 id = 1;
  string customer = 2;
  repeated int32 items = 3;
  Address ship_to = 4;
  map<string, int64> counts = 5;
  oneof payment { string card = 6; string voucher = 7; }
}
message Address { string street = 1; }
"""


def proto(body: str, header: str = 'syntax = "proto3";\npackage shop;\n') -> str:
    return header + body


def error_types(level: str, new: str, *previous: str) -> list[str]:
    found = incompatibilities(
        level, parse_schema("PROTOBUF", new), [parse_schema("PROTOBUF", p) for p in previous]
    )
    return [m.split('"')[1] for m in found if m.startswith("{errorType")]


def test_proto_source_parses_and_serializes_as_a_descriptor() -> None:
    parsed = parse_schema("PROTOBUF", BASE)
    assert parsed.canonical == BASE.strip()
    file = descriptor_pb2.FileDescriptorProto.FromString(
        base64.b64decode(serialized_form(parsed, "serialized"))
    )
    assert file.package == "shop" and [m.name for m in file.message_type] == ["Order", "Address"]
    # the serialized form is itself a schema, and the same schema
    again = parse_schema("PROTOBUF", serialized_form(parsed, "serialized"))
    assert error_types("FULL", serialized_form(parsed, "serialized"), BASE) == []
    assert serialized_form(again, None) == again.canonical


def test_the_descriptor_confluent_kafkas_serializer_registers_parses() -> None:
    file = descriptor_pb2.FileDescriptorProto(name="shop/event.proto", package="shop", syntax="proto3")
    file.dependency.append("google/protobuf/timestamp.proto")  # well-known: never sent as a reference
    message = file.message_type.add(name="Event")
    message.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=1)
    message.field.add(
        name="at",
        number=2,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        label=1,
        type_name=".google.protobuf.Timestamp",
    )
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    registered = _schema_to_str(pool.AddSerializedFile(file.SerializeToString()))
    parsed = parse_schema("PROTOBUF", registered)
    assert parsed.canonical == registered
    assert serialized_form(parsed, "serialized") == registered
    assert parse_schema("PROTOBUF", registered, normalize=True).canonical  # a normalized descriptor too


def test_imports_of_another_file_as_a_reference() -> None:
    common = 'syntax = "proto3";\npackage common;\nmessage Money { int64 units = 1; string currency = 2; }\n'
    order = proto('import "common/money.proto";\nmessage Order { common.Money total = 1; }\n')
    with pytest.raises(InvalidSchema, match="common/money.proto"):
        parse_schema("PROTOBUF", order)
    v1 = parse_schema("PROTOBUF", order, {"common/money.proto": common})
    # the referenced file as a registered descriptor works as well, for a descriptor schema
    common_b64 = serialized_form(parse_schema("PROTOBUF", common), "serialized")
    order_b64 = serialized_form(v1, "serialized")
    assert parse_schema("PROTOBUF", order_b64, {"common/money.proto": common_b64}).schema_type == "PROTOBUF"
    # a change inside the referenced message is seen through the field
    common_v2 = common.replace("string currency = 2;", "int32 currency = 2;")
    v2 = parse_schema("PROTOBUF", order, {"common/money.proto": common_v2})
    found = incompatibilities("BACKWARD", v2, [v1])
    assert [m.split('"')[1] for m in found[:-1]] == ["FIELD_SCALAR_KIND_CHANGED", "FIELD_NAMED_TYPE_CHANGED"]


def test_invalid_schemas_give_one_line_messages() -> None:
    for text, expected in [
        (proto("message A { Unknown u = 1; }"), '"Unknown" is not defined'),
        (proto("message A { int32 a = 1; int32 b = 1; }"), "has already been used"),
        ('syntax = "proto3"; message {', "Expected"),
        ("bm90IGEgZGVzY3JpcHRvcg", "not a serialized FileDescriptorProto"),
    ]:
        with pytest.raises(InvalidSchema) as raised:
            parse_schema("PROTOBUF", text)
        message = str(raised.value)
        assert (
            message.startswith("Invalid Protobuf schema") and expected in message and "\n" not in message
        ), message
    with pytest.raises(InvalidSchema, match="relative import path"):
        parse_schema("PROTOBUF", BASE, {"../etc/passwd": BASE})


CASES = [
    # (change, new schema, backward ok?, forward ok?, the incompatible type)
    (
        "field added",
        BASE.replace("}\nmessage Address", "  bool gift = 8;\n}\nmessage Address"),
        True,
        True,
        None,
    ),
    ("field removed", BASE.replace("  string customer = 2;\n", ""), True, True, None),
    ("field renamed", BASE.replace("customer = 2", "buyer = 2"), True, True, None),
    (
        "int32 -> int64 (same wire group)",
        BASE.replace("repeated int32 items", "repeated int64 items"),
        True,
        True,
        None,
    ),
    ("string -> bytes", BASE.replace("string customer", "bytes customer"), True, True, None),
    (
        "int64 -> string",
        BASE.replace("int64 id = 1", "string id = 1"),
        False,
        False,
        "FIELD_SCALAR_KIND_CHANGED",
    ),
    (
        "int64 -> sint64",
        BASE.replace("int64 id = 1", "sint64 id = 1"),
        False,
        False,
        "FIELD_SCALAR_KIND_CHANGED",
    ),
    (
        "scalar -> message",
        BASE.replace("string customer = 2", "Address customer = 2"),
        False,
        False,
        "FIELD_KIND_CHANGED",
    ),
    (
        "repeated numeric -> singular",
        BASE.replace("repeated int32 items", "optional int32 items"),
        False,
        False,
        "FIELD_NUMERIC_LABEL_CHANGED",
    ),
    (
        "message renamed",
        BASE.replace("message Address", "message Place").replace("Address ship_to", "Place ship_to"),
        False,
        False,
        "MESSAGE_REMOVED",
    ),
    ("package changed", BASE.replace("package shop;", "package store;"), False, False, "PACKAGE_CHANGED"),
    (
        "map value type",
        BASE.replace("map<string, int64>", "map<string, string>"),
        False,
        False,
        "FIELD_SCALAR_KIND_CHANGED",
    ),
    (
        "oneof field moved out",
        BASE.replace(
            "oneof payment { string card = 6; string voucher = 7; }",
            "string card = 6;\n oneof payment { string voucher = 7; }",
        ),
        True,
        False,
        "FIELD_MOVED_TO_EXISTING_ONEOF",
    ),
    (
        "fields moved into a oneof",
        BASE.replace(
            "  int64 id = 1;\n  string customer = 2;\n",
            "  oneof who { int64 id = 1; string customer = 2; }\n",
        ),
        False,
        True,
        "MULTIPLE_FIELDS_MOVED_TO_ONEOF",
    ),
    (
        "message field type changed",
        BASE.replace("message Address { string street = 1; }", "message Address { int32 street = 1; }"),
        False,
        False,
        "FIELD_NAMED_TYPE_CHANGED",
    ),
]


@pytest.mark.parametrize(("change", "new", "backward", "forward", "kind"), CASES, ids=[c[0] for c in CASES])
def test_rules_in_both_directions(
    change: str, new: str, backward: bool, forward: bool, kind: str | None
) -> None:
    back, fwd = error_types("BACKWARD", new, BASE), error_types("FORWARD", new, BASE)
    assert (back == []) is backward, back
    assert (fwd == []) is forward, fwd
    if kind:
        assert kind in back + fwd


def test_proto2_required_fields() -> None:
    v1 = 'syntax = "proto2";\nmessage M { required int32 a = 1; optional string b = 2; }\n'
    v2 = 'syntax = "proto2";\nmessage M { required int32 a = 1; optional string b = 2; required int32 c = 3; }\n'
    assert error_types("BACKWARD", v2, v1) == ["REQUIRED_FIELD_ADDED"]
    assert error_types("FORWARD", v2, v1) == ["REQUIRED_FIELD_REMOVED"]
    message = incompatibilities("BACKWARD", parse_schema("PROTOBUF", v2), [parse_schema("PROTOBUF", v1)])[0]
    assert message == (
        '{errorType:"REQUIRED_FIELD_ADDED", description:"A required field  at path \'#/M/3\' in the new schema '
        'is missing in the old schema"}'
    )


def test_transitive_finds_the_older_breaking_version() -> None:
    v1 = proto("message M { int64 a = 1; }")
    v2 = proto("message M { int64 b = 2; }")  # a removed: fine
    v3 = proto("message M { int64 b = 2; string a = 1; }")  # number 1 reused with another wire type
    assert error_types("BACKWARD", v3, v1, v2) == []
    assert error_types("BACKWARD_TRANSITIVE", v3, v1, v2) == ["FIELD_SCALAR_KIND_CHANGED"]
    assert error_types("FULL_TRANSITIVE", v3, v1, v2) == [
        "FIELD_SCALAR_KIND_CHANGED",
        "FIELD_SCALAR_KIND_CHANGED",
    ]
