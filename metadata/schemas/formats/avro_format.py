"""Avro schemas: parse and validate with Apache `avro`, canonical and normalized text.

Parsing: the references (reference name -> the referenced schema's text, in dependency order)
are parsed first into one `avro.name.Names`, so that the schema can name the record types they
define (Confluent's references for Avro: the name is the fully-qualified type name). Any error
of `avro` (bad JSON, unknown type name, bad default, duplicate names...) is `InvalidSchema`.

Text forms:
- as given (`normalize=False`): the JSON re-dumped compact, key order kept, so that two
  registrations that differ only in whitespace are the same schema;
- normalized (`normalize=True`): Confluent's normalized form, written as Avro Java's
  `Schema.toString()` writes it (Confluent stores that text): attributes in Avro's order
  (`type`, `name`, `namespace`, `doc`, `fields`/`symbols`/`size`/`items`/`values`, then the
  extra properties, sorted, and `aliases`, sorted); fields `name`, `type`, `doc`, `default`,
  `order` (when not ascending), `aliases`, properties. Logical types, defaults, aliases and
  docs are kept. A named type is written in full where it first appears and by name after
  that (relative to the enclosing namespace), and types defined by references by name always;
- resolved (`format=resolved`): the same writer, with the referenced types inlined.
Pure: no I/O.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import avro.errors
import avro.name
import avro.schema
from skiff.metadata.schemas.formats.model import InvalidSchema, ParsedSchema, one_line

# The JSON attributes Avro itself interprets, per kind of schema: everything else on a schema
# or a field is an extra property, kept and written after them.
_RESERVED = frozenset(
    {
        "type",
        "name",
        "namespace",
        "doc",
        "fields",
        "symbols",
        "size",
        "items",
        "values",
        "aliases",
        "default",
        "order",
    }
)
_NAMED = ("record", "error", "enum", "fixed")
_LOGICAL = ("logicalType", "precision", "scale")


@dataclass(frozen=True)
class AvroParsed:
    """The parsed schema and the full names its references define."""

    schema: avro.schema.Schema
    reference_names: frozenset[str]


def parse(text: str, references: Mapping[str, str], normalize: bool) -> ParsedSchema:
    """Parse and validate `text` against its references; InvalidSchema when it is not Avro."""
    names = avro.name.Names()
    for ref_name, ref_text in references.items():
        _make(ref_text, names, f"reference {ref_name!r}: ")
    reference_names = frozenset(names.names)
    document, schema = _make(text, names, "")
    _check_defaults(schema, set())
    parsed = AvroParsed(schema, reference_names)
    if normalize:
        canonical = write(parsed, sort=True, inline_references=False)
    else:
        canonical = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    return ParsedSchema("AVRO", canonical, parsed)


def _make(text: str, names: avro.name.Names, where: str) -> tuple[Any, avro.schema.Schema]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidSchema(f"Invalid Avro schema: {where}not JSON: {e}") from e
    try:
        # avro warns (IgnoredLogicalType) where Java silently drops a bad logical type: the
        # schema stays valid, the annotation is ignored, as Avro's spec says.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            schema = avro.schema.make_avsc_object(document, names)
    except (avro.errors.AvroException, TypeError, ValueError, AttributeError, KeyError) as e:
        raise InvalidSchema(f"Invalid Avro schema: {where}{one_line(e)}") from e
    return document, schema


def _check_defaults(schema: Any, seen: set[int]) -> None:
    """Every field default is a value of the field's type (Avro Java's validateDefaults)."""
    if id(schema) in seen:
        return
    seen.add(id(schema))
    kind = schema.type
    if kind in ("record", "error"):
        for field in schema.fields:
            if field.has_default and not _valid_default(field.type, field.props["default"]):
                shown = json.dumps(field.props["default"])
                raise InvalidSchema(
                    f"Invalid Avro schema: invalid default for field {field.name}: {shown} not a {field.type.type}"
                )
            _check_defaults(field.type, seen)
    for child in _children(schema):
        _check_defaults(child, seen)


def _children(schema: Any) -> list[Any]:
    if schema.type == "union":
        return list(schema.schemas)
    if schema.type == "array":
        return [schema.items]
    if schema.type == "map":
        return [schema.values]
    return []


_DEFAULT_CHECKS: dict[str, Callable[[Any, Any], bool]] = {
    "null": lambda s, v: v is None,
    "boolean": lambda s, v: isinstance(v, bool),
    "int": lambda s, v: isinstance(v, int) and not isinstance(v, bool) and -(2**31) <= v < 2**31,
    "long": lambda s, v: isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63,
    "float": lambda s, v: isinstance(v, int | float) and not isinstance(v, bool),
    "double": lambda s, v: isinstance(v, int | float) and not isinstance(v, bool),
    "bytes": lambda s, v: isinstance(v, str),
    "string": lambda s, v: isinstance(v, str),
    "fixed": lambda s, v: isinstance(v, str) and len(v) == s.size,
    "enum": lambda s, v: isinstance(v, str) and v in s.symbols,
    "array": lambda s, v: isinstance(v, list) and all(_valid_default(s.items, i) for i in v),
    "map": lambda s, v: isinstance(v, dict) and all(_valid_default(s.values, i) for i in v.values()),
    "union": lambda s, v: any(_valid_default(branch, v) for branch in s.schemas),
}


def _valid_default(schema: Any, value: Any) -> bool:
    """`value` is a JSON default of `schema` (the Avro specification's default encoding)."""
    if schema.type in ("record", "error"):
        return isinstance(value, dict) and all(
            _valid_default(f.type, value[f.name]) if f.name in value else f.has_default for f in schema.fields
        )
    check = _DEFAULT_CHECKS.get(schema.type)
    return check is None or bool(check(schema, value))


def resolved(parsed: AvroParsed) -> str:
    """The schema with every referenced type written in full (Confluent's format=resolved)."""
    return write(parsed, sort=False, inline_references=True)


def write(parsed: AvroParsed, *, sort: bool, inline_references: bool) -> str:
    """The schema as Avro Java's toString writes it; `sort` orders properties and aliases."""
    writer = _Writer(sort, set() if inline_references else set(parsed.reference_names))
    return json.dumps(writer.schema(parsed.schema, None), separators=(",", ":"), ensure_ascii=False)


class _Writer:
    def __init__(self, sort: bool, known: set[str]) -> None:
        self.sort = sort
        self.known = known  # full names already written (or defined by a reference)

    def schema(self, schema: Any, space: str | None) -> Any:
        kind = schema.type
        if isinstance(schema, avro.schema.UnionSchema):
            return [self.schema(branch, space) for branch in schema.schemas]
        if kind in _NAMED:
            return self._named(schema, space)
        out: dict[str, Any] = {"type": kind}
        if kind == "array":
            out["items"] = self.schema(schema.items, space)
        elif kind == "map":
            out["values"] = self.schema(schema.values, space)
        extra = self._extra(schema.props)
        if not extra and len(out) == 1:
            return kind
        out.update(extra)
        return out

    def _named(self, schema: Any, space: str | None) -> Any:
        fullname: str = schema.fullname
        namespace = schema.namespace or None
        if fullname in self.known:
            return schema.name if namespace == space else fullname
        self.known.add(fullname)
        out: dict[str, Any] = {"type": schema.type, "name": schema.name}
        if namespace != space:
            out["namespace"] = namespace or ""
        if schema.props.get("doc") is not None:
            out["doc"] = schema.props["doc"]
        if schema.type == "enum":
            out["symbols"] = list(schema.symbols)
        elif schema.type == "fixed":
            out["size"] = schema.size
        else:
            out["fields"] = [self._field(field, namespace) for field in schema.fields]
        out.update(self._extra(schema.props))
        if schema.props.get("aliases"):
            out["aliases"] = self._aliases(schema.props["aliases"])
        if schema.type == "enum" and schema.props.get("default") is not None:
            out["default"] = schema.props["default"]
        return out

    def _field(self, field: Any, space: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {"name": field.name, "type": self.schema(field.type, space)}
        if field.doc is not None:
            out["doc"] = field.doc
        if field.has_default:
            out["default"] = field.props["default"]
        if field.order not in (None, "ascending"):
            out["order"] = field.order
        if field.props.get("aliases"):
            out["aliases"] = self._aliases(field.props["aliases"])
        out.update(self._extra(field.props))
        return out

    def _extra(self, props: Mapping[str, Any]) -> dict[str, Any]:
        extra = {k: v for k, v in props.items() if k not in _RESERVED}
        if not self.sort:
            return extra
        # Confluent's normalizer writes a logical type's own attributes first, then the rest sorted.
        logical = {k: extra.pop(k) for k in _LOGICAL if k in extra}
        return logical | dict(sorted(extra.items()))

    def _aliases(self, aliases: list[str]) -> list[str]:
        return sorted(aliases) if self.sort else list(aliases)
