"""The compatibility levels (metadata.schemas.formats.levels): which versions each level checks,
in which direction, newest first, stopping at the first that fails, and Confluent's old-schema
trailer; driven with a recording pair check so that only the level logic is under test."""

from __future__ import annotations

import pytest
from skiff.metadata.schemas.formats import LEVELS, ParsedSchema
from skiff.metadata.schemas.formats.levels import DIFFERENT_SCHEMA_TYPE, MAX_OLD_SCHEMA_CHARS, check_level


def schema(name: str, schema_type: str = "AVRO") -> ParsedSchema:
    return ParsedSchema(schema_type, name, None)


class Recorder:
    """A pair check that records its calls and fails the pairs it is told to."""

    def __init__(self, failing: set[tuple[str, str]] = frozenset()) -> None:  # type: ignore[assignment]
        self.calls: list[tuple[str, str, str, str]] = []
        self.failing = failing

    def __call__(
        self, reader: ParsedSchema, writer: ParsedSchema, reader_label: str, writer_label: str
    ) -> list[str]:
        self.calls.append((reader.canonical, writer.canonical, reader_label, writer_label))
        if (reader.canonical, writer.canonical) in self.failing:
            return [f"{reader.canonical} cannot read {writer.canonical}"]
        return []


V1, V2, V3, NEW = schema("v1"), schema("v2"), schema("v3"), schema("new")


@pytest.mark.parametrize(
    ("level", "expected_calls"),
    [
        ("NONE", []),
        ("BACKWARD", [("new", "v3", "new", "old")]),
        ("FORWARD", [("v3", "new", "old", "new")]),
        ("FULL", [("v3", "new", "old", "new"), ("new", "v3", "new", "old")]),
        (
            "BACKWARD_TRANSITIVE",
            [("new", "v3", "new", "old"), ("new", "v2", "new", "old"), ("new", "v1", "new", "old")],
        ),
        (
            "FORWARD_TRANSITIVE",
            [("v3", "new", "old", "new"), ("v2", "new", "old", "new"), ("v1", "new", "old", "new")],
        ),
        (
            "FULL_TRANSITIVE",
            [
                ("v3", "new", "old", "new"),
                ("new", "v3", "new", "old"),
                ("v2", "new", "old", "new"),
                ("new", "v2", "new", "old"),
                ("v1", "new", "old", "new"),
                ("new", "v1", "new", "old"),
            ],
        ),
    ],
)
def test_each_level_checks_its_versions_in_its_direction(
    level: str, expected_calls: list[tuple[str, ...]]
) -> None:
    recorder = Recorder()
    assert check_level(level, NEW, [V1, V2, V3], recorder) == []
    assert recorder.calls == expected_calls
    assert level in LEVELS


def test_transitive_stops_at_the_newest_failing_version() -> None:
    recorder = Recorder({("new", "v2"), ("new", "v1")})
    assert check_level("BACKWARD_TRANSITIVE", NEW, [V1, V2, V3], recorder) == [
        "new cannot read v2",
        "{oldSchema: 'v2'}",
    ]
    assert [c[1] for c in recorder.calls] == ["v3", "v2"]
    assert check_level("BACKWARD", NEW, [V1, V2, V3], Recorder({("new", "v2")})) == []


def test_full_puts_forward_messages_first_and_the_old_schema_after_the_backward_ones() -> None:
    both = Recorder({("v1", "new"), ("new", "v1")})
    assert check_level("FULL", NEW, [V1], both) == [
        "v1 cannot read new",
        "new cannot read v1",
        "{oldSchema: 'v1'}",
    ]
    forward_only = Recorder({("v1", "new")})
    assert check_level("FULL", NEW, [V1], forward_only) == ["v1 cannot read new"]
    assert check_level("FORWARD", NEW, [V1], forward_only) == ["v1 cannot read new", "{oldSchema: 'v1'}"]


def test_another_schema_type_is_one_message_and_no_check() -> None:
    older_json = [schema("j", "JSON"), V1]
    assert check_level("FULL", NEW, older_json, Recorder()) == []  # only the latest counts
    assert check_level("FULL_TRANSITIVE", NEW, older_json, Recorder()) == [DIFFERENT_SCHEMA_TYPE]
    recorder = Recorder()
    assert check_level("BACKWARD", NEW, [V1, schema("j", "JSON")], recorder) == [DIFFERENT_SCHEMA_TYPE]
    assert recorder.calls == []


def test_long_old_schemas_are_cut() -> None:
    big = schema("x" * (MAX_OLD_SCHEMA_CHARS + 5))
    [_, trailer] = check_level("BACKWARD", NEW, [big], Recorder({("new", big.canonical)}))
    assert trailer == "{oldSchema: <truncated> '" + "x" * MAX_OLD_SCHEMA_CHARS + "...'}"


def test_no_previous_versions_and_unknown_levels() -> None:
    assert check_level("FULL_TRANSITIVE", NEW, [], Recorder()) == []
    with pytest.raises(ValueError, match="unknown compatibility level"):
        check_level("backward", NEW, [V1], Recorder())
