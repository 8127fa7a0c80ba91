"""The values every schema format shares: the parsed schema, the error, the bounds.

A `ParsedSchema` is what `parse_schema` gives for AVRO, JSON and PROTOBUF alike: the type,
the text that is stored and compared (`canonical`), and the type's own parsed object that the
compatibility checks walk. `InvalidSchema` is Confluent's 42201: the text does not parse or is
not a valid schema of its type; its message is one line a user can act on. Pure values, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")

# Bounds on what one registration may carry: Confluent has none by default, but a registry
# inside the metadata service must not parse unbounded text (a schema is kept in one row).
MAX_SCHEMA_CHARS = 1_000_000
MAX_REFERENCES = 1_000


class InvalidSchema(ValueError):
    """The schema text does not parse / is not a valid schema of its type (Confluent 42201);
    str(e) is a one-line message a user can act on."""

    def __init__(self, message: str) -> None:
        # One line, bounded: parsers' messages can span lines or quote a whole schema.
        one_line = " ".join(message.split())
        super().__init__(one_line if len(one_line) <= 1_000 else one_line[:997] + "...")


@dataclass(frozen=True)
class ParsedSchema:
    """A schema of one of SCHEMA_TYPES, parsed and validated."""

    schema_type: str  # one of SCHEMA_TYPES
    canonical: str  # the text stored and compared (see parse_schema)
    parsed: Any  # the type's parsed object, for the compatibility checks


def one_line(error: BaseException) -> str:
    """A library exception's message on one line (its first line when it has several)."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
