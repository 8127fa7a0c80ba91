"""Avro compatibility: can a reader schema read data written with a writer schema?

The rules are Avro's schema resolution (the specification's "Schema Resolution"), walked as
Avro Java's `SchemaCompatibility` walks them, because Confluent's messages are built from what
that walk reports (type, location, message). Apache `avro`'s Python
`ReaderWriterCompatibilityChecker` implements the same rules and gives the same verdict (the
tests check both agree), but keeps its messages and locations in unordered sets, so a message
cannot be matched to its place; this walk keeps them together.

| reader vs writer                      | incompatible when                                  | error type                           |
|---------------------------------------|----------------------------------------------------|--------------------------------------|
| same primitive                        | never                                              |                                      |
| promotable (int->long/float/double, long->float/double, float->double, string<->bytes) | never |             |
| record, enum, fixed                   | the names differ (reader aliases count)            | NAME_MISMATCH                        |
| fixed                                 | the sizes differ                                   | FIXED_SIZE_MISMATCH                  |
| enum                                  | writer symbols the reader lacks, and no reader default | MISSING_ENUM_SYMBOLS             |
| record                                | a reader field missing in the writer without default | READER_FIELD_MISSING_DEFAULT_VALUE |
| array / map                           | the items / values are                             | (theirs)                             |
| writer union                          | any writer branch the reader cannot read           | MISSING_UNION_BRANCH / (theirs)      |
| reader union, writer not              | no reader branch reads the writer                  | MISSING_UNION_BRANCH                 |
| anything else                         | always                                             | TYPE_MISMATCH                        |

Each incompatibility is one line in Confluent's form: `{errorType:'...', description:'...',
additionalInfo:'...'}`, locations as JSON pointers (`/fields/1/type`). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import avro.schema

_PROMOTIONS = {
    "long": {"int"},
    "float": {"int", "long"},
    "double": {"int", "long", "float"},
    "bytes": {"string"},
    "string": {"bytes"},
}
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


@dataclass(frozen=True)
class Incompatibility:
    error_type: str
    location: str  # a JSON pointer into the reader schema
    message: str  # Avro's detail, Confluent's additionalInfo


def describe(item: Incompatibility, reader_label: str, writer_label: str) -> str:
    """Confluent's one-line message for one incompatibility (its avro.Difference)."""
    path, info = item.location, item.message
    descriptions = {
        "FIXED_SIZE_MISMATCH": f"The size of FIXED type field at path '{path}' in the {reader_label} "
        f"schema does not match with the {writer_label} schema",
        "TYPE_MISMATCH": f"The type (path '{path}') of a field in the {reader_label} schema does not "
        f"match with the {writer_label} schema",
        "NAME_MISMATCH": f"The name of the schema has changed (path '{path}')",
        "MISSING_ENUM_SYMBOLS": f"The {reader_label} schema is missing enum symbols '{info}' at path "
        f"'{path}' in the {writer_label} schema",
        "MISSING_UNION_BRANCH": f"The {reader_label} schema is missing a type inside a union field at "
        f"path '{path}' in the {writer_label} schema",
        "READER_FIELD_MISSING_DEFAULT_VALUE": f"The field '{info}' at path '{path}' in the "
        f"{reader_label} schema has no default value and is missing in the {writer_label} schema",
    }
    description = descriptions.get(item.error_type, "")
    return f"{{errorType:'{item.error_type}', description:'{description}', additionalInfo:'{info}'}}"


def check(reader: avro.schema.Schema, writer: avro.schema.Schema) -> list[Incompatibility]:
    """Every incompatibility of reading data written with `writer` using `reader`."""
    return _Walk().pair(reader, writer, [])


class _Walk:
    def __init__(self) -> None:
        # Pairs already checked (or being checked: recursive types), as Avro Java memoizes;
        # a pair met again while in progress counts as compatible.
        self.memo: dict[tuple[int, int], list[Incompatibility]] = {}

    def pair(self, reader: Any, writer: Any, location: list[str]) -> list[Incompatibility]:
        key = (id(reader), id(writer))
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = []
        result = self._calculate(reader, writer, location)
        self.memo[key] = result
        return result

    def _calculate(self, reader: Any, writer: Any, location: list[str]) -> list[Incompatibility]:
        r, w = reader.type, writer.type
        if r == w or {r, w} <= {"record", "error"}:
            return self._same_kind(reader, writer, location)
        if w == "union":
            found: list[Incompatibility] = []
            for index, branch in enumerate(writer.schemas):
                found += self.pair(reader, branch, [*location, str(index)])
            return found
        if w in _PROMOTIONS.get(r, ()):
            return []
        if r == "union":
            if any(not self.pair(branch, writer, location) for branch in reader.schemas):
                return []
            return [_at("MISSING_UNION_BRANCH", location, f"reader union lacking writer type: {w.upper()}")]
        return [
            _at(
                "TYPE_MISMATCH",
                location,
                f"reader type: {r.upper()} not compatible with writer type: {w.upper()}",
            )
        ]

    def _same_kind(self, reader: Any, writer: Any, location: list[str]) -> list[Incompatibility]:
        kind = reader.type
        if kind in _PRIMITIVES:
            return []
        if kind == "array":
            return self.pair(reader.items, writer.items, [*location, "items"])
        if kind == "map":
            return self.pair(reader.values, writer.values, [*location, "values"])
        if kind == "union":
            found = []
            for index, branch in enumerate(writer.schemas):
                if self.pair(reader, branch, [*location, str(index)]):
                    message = f"reader union lacking writer type: {branch.type.upper()}"
                    found.append(_at("MISSING_UNION_BRANCH", [*location, str(index)], message))
            return found
        found = _names(reader, writer, location)
        if kind == "fixed" and reader.size != writer.size:
            message = f"expected: {writer.size}, found: {reader.size}"
            found.append(_at("FIXED_SIZE_MISMATCH", [*location, "size"], message))
        elif kind == "enum":
            found += _enum_symbols(reader, writer, location)
        elif kind in ("record", "error"):
            found += self._fields(reader, writer, location)
        return found

    def _fields(self, reader: Any, writer: Any, location: list[str]) -> list[Incompatibility]:
        found: list[Incompatibility] = []
        for index, field in enumerate(reader.fields):
            at = [*location, "fields", str(index)]
            written = _writer_field(writer, field)
            if written is not None:
                found += self.pair(field.type, written.type, [*at, "type"])
            elif field.has_default:
                continue
            elif field.type.type == "enum" and field.type.props.get("default") is not None:
                # As Avro Java does: an enum with a default symbol is checked against the writer.
                found += self.pair(field.type, writer, [*at, "type"])
            else:
                found.append(_at("READER_FIELD_MISSING_DEFAULT_VALUE", at, field.name))
        return found


def _names(reader: Any, writer: Any, location: list[str]) -> list[Incompatibility]:
    aliases = reader.props.get("aliases") or []
    qualified = {a if "." in a or not reader.namespace else f"{reader.namespace}.{a}" for a in aliases}
    if reader.name == writer.name or writer.fullname in qualified:
        return []
    return [_at("NAME_MISMATCH", [*location, "name"], f"expected: {writer.fullname}")]


def _enum_symbols(reader: Any, writer: Any, location: list[str]) -> list[Incompatibility]:
    missing = sorted(set(writer.symbols) - set(reader.symbols))
    default = reader.props.get("default")
    if not missing or (default is not None and default in reader.symbols):
        return []
    return [_at("MISSING_ENUM_SYMBOLS", [*location, "symbols"], f"[{', '.join(missing)}]")]


def _writer_field(writer: Any, field: Any) -> Any:
    found = writer.fields_dict.get(field.name)
    if found is not None:
        return found
    for alias in field.props.get("aliases") or []:
        if alias in writer.fields_dict:
            return writer.fields_dict[alias]
    return None


def _at(error_type: str, location: list[str], message: str) -> Incompatibility:
    pointer = "/" + "/".join(token.replace("~", "~0").replace("/", "~1") for token in location)
    return Incompatibility(error_type, pointer, message)
