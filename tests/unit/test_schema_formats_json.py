"""JSON Schemas in the registry (metadata.schemas.formats): metaschema validation per draft,
$ref to references, canonical text, and Confluent's JSON Schema compatibility rules (content
models, types, limits, enums, combined schemas) in both directions and transitively."""

from __future__ import annotations

import json
from typing import Any

import pytest
from skiff.metadata.schemas.formats import InvalidSchema, incompatibilities, parse_schema


def obj(properties: dict[str, Any], *, required: list[str] | None = None, **extra: Any) -> str:
    schema: dict[str, Any] = {"type": "object", "properties": properties, **extra}
    if required:
        schema["required"] = required
    return json.dumps(schema)


def errors(level: str, new: str, *previous: str) -> list[str]:
    return incompatibilities(level, parse_schema("JSON", new), [parse_schema("JSON", p) for p in previous])


def error_types(level: str, new: str, *previous: str) -> list[str]:
    return [m.split('"')[1] for m in errors(level, new, *previous) if m.startswith("{errorType")]


OPEN_V1 = obj({"a": {"type": "string"}})
OPEN_V2 = obj({"a": {"type": "string"}, "b": {"type": "integer"}})
CLOSED_V1 = obj({"a": {"type": "string"}}, additionalProperties=False)
CLOSED_V2 = obj({"a": {"type": "string"}, "b": {"type": "integer"}}, additionalProperties=False)
PARTIAL = obj({"a": {"type": "string"}}, additionalProperties={"type": "integer"})


def test_canonical_text_is_compact_with_key_order_kept_or_sorted() -> None:
    spaced = '{\n  "type": "object",\n  "properties": {"b": {"type": "string"}, "a": {"type": "number"}}\n}'
    parsed = parse_schema("JSON", spaced)
    assert parsed.canonical == '{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"number"}}}'
    normal = parse_schema("JSON", spaced, normalize=True).canonical
    assert normal == '{"properties":{"a":{"type":"number"},"b":{"type":"string"}},"type":"object"}'


@pytest.mark.parametrize(
    "text",
    [
        "{oops",
        "[1, 2]",
        '{"type": "strung"}',
        '{"$schema": "https://json-schema.org/draft/2020-12/schema", "minLength": -1}',
        '{"properties": {"a": {"$ref": "#/definitions/missing"}}}',
        '{"$ref": "other.json"}',
    ],
)
def test_invalid_schemas_give_one_line_messages(text: str) -> None:
    with pytest.raises(InvalidSchema) as raised:
        parse_schema("JSON", text)
    assert str(raised.value).startswith("Invalid JSON schema") and "\n" not in str(raised.value)


def test_ref_to_a_reference_and_its_evolution() -> None:
    address_v1 = '{"type":"object","properties":{"street":{"type":"string"}},"additionalProperties":false}'
    address_v2 = '{"type":"object","properties":{"street":{"type":"string"},"zip":{"type":"string"}},"additionalProperties":false}'
    address_v3 = '{"type":"object","properties":{"street":{"type":"integer"}},"additionalProperties":false}'
    user = obj({"home": {"$ref": "address.json"}})
    v1 = parse_schema("JSON", user, {"address.json": address_v1})
    v2 = parse_schema("JSON", user, {"address.json": address_v2})
    v3 = parse_schema("JSON", user, {"address.json": address_v3})
    assert incompatibilities("BACKWARD", v2, [v1]) == []  # optional property added to a closed model
    assert incompatibilities("FORWARD", v2, [v1]) != []  # the old closed model refuses zip
    [message, _old] = incompatibilities("BACKWARD", v3, [v1])
    assert (
        message.startswith('{errorType:"TYPE_CHANGED"') and "'#/properties/home/properties/street'" in message
    )
    # internal definitions resolve too
    internal = '{"definitions":{"s":{"type":"string"}},"type":"object","properties":{"a":{"$ref":"#/definitions/s"}}}'
    assert errors("BACKWARD", internal, OPEN_V1) == []


CASES = [
    # (old, new, backward ok?, forward ok?)
    (OPEN_V1, OPEN_V2, False, True),  # property added to an open model: old data may have any b
    (CLOSED_V1, CLOSED_V2, True, False),  # property added to a closed model
    (OPEN_V2, OPEN_V1, True, False),  # property removed from an open model
    (CLOSED_V2, CLOSED_V1, False, True),  # removed from a closed model
    (
        PARTIAL,
        obj({"a": {"type": "string"}, "b": {"type": "integer"}}, additionalProperties={"type": "integer"}),
        True,
        True,
    ),
    (
        PARTIAL,
        obj({"a": {"type": "string"}, "b": {"type": "string"}}, additionalProperties={"type": "integer"}),
        False,
        False,
    ),
    (obj({"a": {"type": "integer"}}), obj({"a": {"type": "number"}}), True, False),  # widened
    (obj({"a": {"type": "string"}}), obj({"a": {"type": ["string", "null"]}}), True, False),  # union widened
    (
        obj({"a": {"type": "string", "maxLength": 5}}),
        obj({"a": {"type": "string", "maxLength": 10}}),
        True,
        False,
    ),
    (obj({"a": {"type": "number", "minimum": 0}}), obj({"a": {"type": "number"}}), True, False),
    (
        obj({"a": {"type": "number", "multipleOf": 4}}),
        obj({"a": {"type": "number", "multipleOf": 2}}),
        True,
        False,
    ),
    (obj({"a": {"enum": ["x", "y"]}}), obj({"a": {"enum": ["x", "y", "z"]}}), True, False),
    (
        obj({"a": {"type": "string"}}),
        obj({"a": {"type": "string"}}, required=["a"]),
        False,
        True,
    ),  # required added
    (
        obj({"a": {"type": "string"}}),
        obj({"a": {"type": "string", "default": ""}}, required=["a"]),
        True,
        True,
    ),
    (obj({"a": {"type": "string", "pattern": "^x"}}), obj({"a": {"type": "string"}}), True, False),
    (
        json.dumps({"type": "array", "items": {"type": "integer"}}),
        json.dumps({"type": "array", "items": {"type": "number"}, "uniqueItems": False}),
        True,
        False,
    ),
    (
        json.dumps({"oneOf": [{"type": "string"}, {"type": "integer"}]}),
        json.dumps({"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}]}),
        True,
        False,
    ),
    (json.dumps({"not": {"type": "string"}}), json.dumps({"not": {"type": ["string", "null"]}}), False, True),
]


@pytest.mark.parametrize(("old", "new", "backward", "forward"), CASES)
def test_rules_in_both_directions(old: str, new: str, backward: bool, forward: bool) -> None:
    assert (errors("BACKWARD", new, old) == []) is backward
    assert (errors("FORWARD", new, old) == []) is forward
    assert (errors("FULL", new, old) == []) is (backward and forward)


def test_messages_name_the_rule_and_path() -> None:
    assert error_types("BACKWARD", OPEN_V2, OPEN_V1) == ["OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"]
    assert errors("BACKWARD", OPEN_V2, OPEN_V1)[0] == (
        '{errorType:"OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", description:"The new schema has an open '
        "content model and has a property or item at path '#/properties/b' which is missing in the old schema'}"
    )
    assert error_types("BACKWARD", CLOSED_V1, CLOSED_V2) == ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"]
    tighter = obj({"a": {"type": "string", "maxLength": 3}})
    assert error_types("BACKWARD", tighter, OPEN_V1) == ["MAX_LENGTH_ADDED"]
    assert (
        "'#/properties/a/maxLength' in the new schema is not present in the old schema"
        in errors("BACKWARD", tighter, OPEN_V1)[0]
    )


def test_backward_versus_backward_transitive() -> None:
    v1 = obj({"a": {"type": "string"}}, additionalProperties=False)
    v2 = obj({"a": {"type": "string"}, "b": {"type": "string"}}, additionalProperties=False)
    v3 = obj({"b": {"type": "string"}}, additionalProperties=False)  # drops a: v2 data fails
    v3_from_v2 = obj(
        {"a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "string"}},
        additionalProperties=False,
    )
    assert errors("BACKWARD", v3_from_v2, v1, v2) == []
    assert errors("BACKWARD_TRANSITIVE", v3_from_v2, v1, v2) == []
    assert errors("BACKWARD", v3, v1, v2) != []
    # a version compatible with the latest only: narrowing that v2 already had
    w1 = obj({"a": {"type": "number"}})
    w2 = obj({"a": {"type": "integer"}})
    w3 = obj({"a": {"type": "integer"}, "b": {"type": "string"}}, additionalProperties=False)
    assert errors("BACKWARD", w2, w1) != []  # number -> integer narrows
    assert errors("BACKWARD", w3, w1, w2) != []  # b added to w2's open model, which allowed any b
    closed1 = obj({"a": {"type": "integer"}}, additionalProperties=False)
    closed2 = obj({"a": {"type": "integer", "maximum": 10}}, additionalProperties=False)
    closed3 = obj(
        {"a": {"type": "integer", "maximum": 10}, "b": {"type": "string"}}, additionalProperties=False
    )
    assert errors("BACKWARD", closed3, closed1, closed2) == []
    assert error_types("BACKWARD_TRANSITIVE", closed3, closed1, closed2) == ["MAXIMUM_ADDED"]


def test_recursive_schema_terminates() -> None:
    tree = '{"$defs":{"n":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/n"}}}}},"$ref":"#/$defs/n"}'
    assert errors("FULL", tree, tree) == []
