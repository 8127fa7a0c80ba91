"""Avro schemas in the registry (metadata.schemas.formats): parsing with references, canonical
and normalized text, and compatibility by Avro's resolution rules with Confluent's messages,
checked in both directions and against Apache avro's own checker's verdict."""

from __future__ import annotations

import json

import avro.compatibility
import pytest
from skiff.metadata.schemas.formats import InvalidSchema, incompatibilities, parse_schema, serialized_form


def record(*fields: dict[str, object], name: str = "User", **extra: object) -> str:
    return json.dumps(
        {"type": "record", "name": name, "namespace": "com.example", **extra, "fields": list(fields)}
    )


V1 = record({"name": "id", "type": "long"}, {"name": "name", "type": "string"})
V2 = record(
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "email", "type": ["null", "string"], "default": None},
)
V3 = record({"name": "id", "type": "long"}, {"name": "email", "type": ["null", "string"], "default": None})


def compatible(level: str, new: str, *previous: str) -> bool:
    parsed = [parse_schema("AVRO", text) for text in previous]
    return incompatibilities(level, parse_schema("AVRO", new), parsed) == []


def test_whitespace_and_newlines_give_the_same_canonical_text() -> None:
    spaced = json.dumps(json.loads(V1), indent=4)
    assert spaced != V1
    assert parse_schema("AVRO", spaced).canonical == parse_schema("AVRO", V1).canonical
    assert parse_schema("AVRO", V1).canonical == json.dumps(json.loads(V1), separators=(",", ":"))


def test_key_order_is_kept_as_given_and_normalized_away() -> None:
    reordered = '{"fields":[{"type":"long","name":"id"},{"name":"name","type":"string"}],"namespace":"com.example","name":"User","type":"record"}'
    assert parse_schema("AVRO", reordered).canonical != parse_schema("AVRO", V1).canonical
    normal = parse_schema("AVRO", reordered, normalize=True).canonical
    assert normal == parse_schema("AVRO", V1, normalize=True).canonical
    assert normal == (
        '{"type":"record","name":"User","namespace":"com.example","fields":'
        '[{"name":"id","type":"long"},{"name":"name","type":"string"}]}'
    )


def test_normalized_form_keeps_logical_types_defaults_aliases_and_docs_sorted() -> None:
    text = record(
        {"name": "amount", "type": {"type": "bytes", "scale": 2, "precision": 9, "logicalType": "decimal"}},
        {
            "name": "at",
            "type": {"type": "long", "logicalType": "timestamp-millis"},
            "default": 0,
            "doc": "when",
        },
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"], "default": "A"}},
        aliases=["Zed", "Alpha"],
        doc="a user",
        **{"connect.name": "x", "a.prop": 1},
    )
    normal = json.loads(parse_schema("AVRO", text, normalize=True).canonical)
    assert list(normal) == ["type", "name", "namespace", "doc", "fields", "a.prop", "connect.name", "aliases"]
    assert normal["aliases"] == ["Alpha", "Zed"]
    amount, at, kind = normal["fields"]
    assert list(amount["type"]) == ["type", "logicalType", "precision", "scale"]
    assert at == {
        "name": "at",
        "type": {"type": "long", "logicalType": "timestamp-millis"},
        "doc": "when",
        "default": 0,
    }
    assert kind["type"]["default"] == "A"


def test_invalid_schemas_give_one_line_messages() -> None:
    cases = [
        "{not json",
        '{"type":"record","name":"R","fields":[{"name":"a","type":"Nope"}]}',
        '{"type":"record","name":"R","fields":[{"name":"a","type":"int","default":"x"}]}',
        '{"type":"enum","name":"E","symbols":["A","A"]}',
        '{"type":"fixed","name":"F"}',
        '"notatype"',
    ]
    for text in cases:
        with pytest.raises(InvalidSchema) as raised:
            parse_schema("AVRO", text)
        message = str(raised.value)
        assert message.startswith("Invalid Avro schema") and "\n" not in message, message


def test_a_record_referencing_another_subjects_record() -> None:
    address = '{"type":"record","name":"Address","namespace":"com.example","fields":[{"name":"street","type":"string"}]}'
    user = record({"name": "id", "type": "long"}, {"name": "home", "type": "com.example.Address"})
    refs = {"com.example.Address": address}
    with pytest.raises(InvalidSchema, match="Address"):
        parse_schema("AVRO", user)
    parsed = parse_schema("AVRO", user, refs)
    assert "street" not in parsed.canonical  # stored as given: the reference by name
    resolved = json.loads(serialized_form(parsed, "resolved"))
    assert resolved["fields"][1]["type"]["fields"] == [{"name": "street", "type": "string"}]
    assert serialized_form(parsed, None) == parsed.canonical == serialized_form(parsed, "bogus")
    assert (
        json.loads(parse_schema("AVRO", user, refs, normalize=True).canonical)["fields"][1]["type"]
        == "Address"
    )
    # a field added to the referenced record, with a default, is backward compatible
    address2 = address.replace('"string"}]', '"string"},{"name":"zip","type":"string","default":""}]')
    new = parse_schema("AVRO", user, {"com.example.Address": address2})
    assert incompatibilities("BACKWARD", new, [parsed]) == []
    address3 = address.replace('"string"}]', '"string"},{"name":"zip","type":"string"}]')
    breaking = parse_schema("AVRO", user, {"com.example.Address": address3})
    [message, _old] = incompatibilities("BACKWARD", breaking, [parsed])
    assert "'/fields/1/type/fields/1'" in message and "READER_FIELD_MISSING_DEFAULT_VALUE" in message


def test_add_optional_field_then_remove_field_transitive_vs_latest() -> None:
    # v1 -> v2 adds a field with a default: fine both ways
    for level in ("BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE", "FULL_TRANSITIVE"):
        assert compatible(level, V2, V1), level
    # v3 drops `name` (no default in v1/v2): v3 can read v2 data (backward) ...
    assert compatible("BACKWARD", V3, V1, V2)
    assert compatible("BACKWARD_TRANSITIVE", V3, V1, V2)
    # ... but v2 cannot read v3 data: forward breaks, at every level that looks forward
    assert not compatible("FORWARD", V3, V1, V2)
    assert not compatible("FULL", V3, V1, V2)
    assert not compatible("FORWARD_TRANSITIVE", V3, V1, V2)
    assert compatible("NONE", V3, V1, V2)


def test_transitive_sees_an_older_version_the_latest_hides() -> None:
    a = record({"name": "id", "type": "long"})
    b = record({"name": "id", "type": "long"}, {"name": "x", "type": "string", "default": ""})
    c = record({"name": "id", "type": "long"}, {"name": "x", "type": "string"})  # default dropped
    assert compatible("BACKWARD", c, a, b)  # b data always carries x
    assert not compatible("BACKWARD_TRANSITIVE", c, a, b)  # a data has no x and c has no default
    messages = incompatibilities(
        "BACKWARD_TRANSITIVE", parse_schema("AVRO", c), [parse_schema("AVRO", a), parse_schema("AVRO", b)]
    )
    assert messages == [
        "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'x' at path '/fields/1' "
        "in the new schema has no default value and is missing in the old schema', additionalInfo:'x'}",
        f"{{oldSchema: '{parse_schema('AVRO', a).canonical}'}}",
    ]


PAIRS = [
    # (reader, writer, compatible?, error type when not)
    ('"long"', '"int"', True, None),
    ('"int"', '"long"', False, "TYPE_MISMATCH"),
    ('"double"', '"float"', True, None),
    ('"string"', '"bytes"', True, None),
    ('["null","string"]', '"string"', True, None),
    ('"string"', '["null","string"]', False, "TYPE_MISMATCH"),
    ('["null","int"]', '["null","string"]', False, "MISSING_UNION_BRANCH"),
    (
        '{"type":"enum","name":"E","symbols":["A","B","C"]}',
        '{"type":"enum","name":"E","symbols":["A","B"]}',
        True,
        None,
    ),
    (
        '{"type":"enum","name":"E","symbols":["A"]}',
        '{"type":"enum","name":"E","symbols":["A","B"]}',
        False,
        "MISSING_ENUM_SYMBOLS",
    ),
    (
        '{"type":"enum","name":"E","symbols":["A","U"],"default":"U"}',
        '{"type":"enum","name":"E","symbols":["A","B"]}',
        True,
        None,
    ),
    (
        '{"type":"fixed","name":"F","size":4}',
        '{"type":"fixed","name":"F","size":8}',
        False,
        "FIXED_SIZE_MISMATCH",
    ),
    ('{"type":"fixed","name":"G","size":4}', '{"type":"fixed","name":"F","size":4}', False, "NAME_MISMATCH"),
    (
        '{"type":"fixed","name":"G","size":4,"aliases":["F"]}',
        '{"type":"fixed","name":"F","size":4}',
        True,
        None,
    ),
    ('{"type":"array","items":"long"}', '{"type":"array","items":"int"}', True, None),
    ('{"type":"map","values":"int"}', '{"type":"map","values":"long"}', False, "TYPE_MISMATCH"),
    (
        record({"name": "n", "type": "long", "aliases": ["old"]}),
        record({"name": "old", "type": "long"}),
        True,
        None,
    ),
    (
        '{"type":"record","name":"Node","fields":[{"name":"v","type":"long"},{"name":"next","type":["null","Node"]}]}',
        '{"type":"record","name":"Node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","Node"]}]}',
        True,
        None,
    ),
]


@pytest.mark.parametrize(("reader", "writer", "ok", "error_type"), PAIRS)
def test_reader_writer_pairs_agree_with_apache_avros_checker(
    reader: str, writer: str, ok: bool, error_type: str | None
) -> None:
    r, w = parse_schema("AVRO", reader), parse_schema("AVRO", writer)
    messages = incompatibilities("BACKWARD", r, [w])  # BACKWARD: the new one reads
    assert (messages == []) is ok
    if error_type:
        assert messages[0].startswith(f"{{errorType:'{error_type}'")
        assert messages[-1].startswith("{oldSchema: ")
    oracle = avro.compatibility.ReaderWriterCompatibilityChecker().get_compatibility(
        r.parsed.schema, w.parsed.schema
    )
    assert (oracle.compatibility is avro.compatibility.SchemaCompatibilityType.compatible) is ok
    # FORWARD puts the same pair the other way round: the old one reads the new one's data
    assert (incompatibilities("FORWARD", w, [r]) == []) is ok


def test_full_lists_forward_messages_then_backward_ones_with_the_old_schema() -> None:
    old = record({"name": "a", "type": "int"})
    new = record({"name": "b", "type": "int"})
    messages = incompatibilities("FULL", parse_schema("AVRO", new), [parse_schema("AVRO", old)])
    assert len(messages) == 3
    assert "in the old schema has no default value and is missing in the new schema" in messages[0]
    assert "in the new schema has no default value and is missing in the old schema" in messages[1]
    assert messages[2].startswith("{oldSchema: ")


def test_different_schema_types_are_incompatible() -> None:
    avro_schema = parse_schema("AVRO", '"string"')
    json_schema = parse_schema("JSON", '{"type":"string"}')
    assert incompatibilities("BACKWARD", avro_schema, [json_schema]) == [
        "Incompatible because of different schema type"
    ]
    assert incompatibilities("NONE", avro_schema, [json_schema]) == []
    assert incompatibilities("BACKWARD", avro_schema, []) == []
    with pytest.raises(ValueError, match="unknown compatibility level"):
        incompatibilities("SIDEWAYS", avro_schema, [avro_schema])


def test_unknown_type_and_oversized_text_are_invalid() -> None:
    with pytest.raises(InvalidSchema, match="Invalid schema type 'XML'"):
        parse_schema("XML", "<a/>")
    with pytest.raises(InvalidSchema, match="longer than"):
        parse_schema("AVRO", '"' + "x" * 1_000_001 + '"')
