"""The compatibility levels: which earlier versions a new schema is checked against, and how.

Confluent Schema Registry's rules (its CompatibilityChecker and SchemaValidatorBuilder):

| level                | checked against                    | check                                   |
|----------------------|------------------------------------|-----------------------------------------|
| NONE                 | nothing                            |                                         |
| BACKWARD             | the latest version                 | new reads data written with old         |
| BACKWARD_TRANSITIVE  | every version, newest first        | new reads data written with old         |
| FORWARD              | the latest version                 | old reads data written with new         |
| FORWARD_TRANSITIVE   | every version, newest first        | old reads data written with new         |
| FULL                 | the latest version                 | both, the forward messages first        |
| FULL_TRANSITIVE      | every version, newest first        | both, the forward messages first        |

A transitive check stops at the first version that gives messages, as Confluent's does. A
version of another schema type gives the one message "Incompatible because of different
schema type". When there are messages, the check that reads with the new schema (backward,
and the second half of full) and the forward check append `{oldSchema: '...'}` with the old
schema's canonical text (cut at 10 KiB), as Confluent's verbose messages do; the version
number (Confluent's `{oldSchemaVersion: N}`) is the caller's to add, it knows the versions.

A type's pair check is `check(reader, writer, reader_label, writer_label)`: the messages for
`reader` reading data written with `writer`, worded with the labels ("new"/"old"). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from skiff.metadata.schemas.formats.model import ParsedSchema

LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)

DIFFERENT_SCHEMA_TYPE = "Incompatible because of different schema type"
MAX_OLD_SCHEMA_CHARS = 10 * 1024

PairCheck = Callable[[ParsedSchema, ParsedSchema, str, str], list[str]]


def check_level(
    level: str, new: ParsedSchema, previous: Sequence[ParsedSchema], check: PairCheck
) -> list[str]:
    """The messages why `new` breaks `level` against `previous` (oldest -> newest); [] if none."""
    if level not in LEVELS:
        raise ValueError(f"unknown compatibility level {level!r}; one of {', '.join(LEVELS)}")
    if level == "NONE" or not previous:
        return []
    targets = list(reversed(previous)) if level.endswith("_TRANSITIVE") else [previous[-1]]
    direction = level.removesuffix("_TRANSITIVE")
    for old in targets:
        if old.schema_type != new.schema_type:
            messages = [DIFFERENT_SCHEMA_TYPE]
        else:
            messages = _check_pair(direction, new, old, check)
        if messages:
            return messages
    return []


def _check_pair(direction: str, new: ParsedSchema, old: ParsedSchema, check: PairCheck) -> list[str]:
    if direction == "BACKWARD":
        return _with_old_schema(check(new, old, "new", "old"), old)
    if direction == "FORWARD":
        return _with_old_schema(check(old, new, "old", "new"), old)
    # FULL: Confluent's mutual-read strategy lists the forward messages (without the old
    # schema) and then the backward ones (with it).
    forward = check(old, new, "old", "new")
    return forward + _with_old_schema(check(new, old, "new", "old"), old)


def _with_old_schema(messages: list[str], old: ParsedSchema) -> list[str]:
    if not messages:
        return messages
    text = old.canonical
    if len(text) <= MAX_OLD_SCHEMA_CHARS:
        return [*messages, f"{{oldSchema: '{text}'}}"]
    return [*messages, f"{{oldSchema: <truncated> '{text[:MAX_OLD_SCHEMA_CHARS]}...'}}"]
