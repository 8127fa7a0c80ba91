"""JSON Schema: parse and validate with `jsonschema`, resolve `$ref` with `referencing`.

A schema is valid when it is a JSON object (or `true`/`false`) that the metaschema of its
draft accepts: the draft named by `$schema` (4, 6, 7, 2019-09, 2020-12), draft 7 when there is
none (Confluent's default). Every `$ref` must resolve: inside the schema (`#/definitions/x`,
`#/$defs/x`) or to a reference (reference name = the `$ref` URL, Confluent's convention for
JSON Schema references, e.g. `"other.json"` or `"https://example.com/address.json"`). Text
forms: as given, re-dumped compact with key order kept; normalized, with keys sorted.

The parsed object (`JsonParsed`) keeps the document and a `referencing` resolver, which the
compatibility checker (json_compat) uses to follow `$ref`. Pure: references come as text, no
URL is ever fetched.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import referencing
import referencing.exceptions
import referencing.jsonschema
from referencing._core import Resolver  # the type only: not exported by name
from skiff.metadata.schemas.formats.model import InvalidSchema, ParsedSchema, one_line

MAX_DEPTH = 200  # nesting of the schema walk (bounded recursion on crafted documents)


@dataclass(frozen=True)
class JsonParsed:
    """The schema document and a resolver for its `$ref`s (relative to its root)."""

    document: Any
    resolver: Resolver[Any]


def parse(text: str, references: Mapping[str, str], normalize: bool) -> ParsedSchema:
    document = _load(text, "")
    validator = jsonschema.validators.validator_for(document, default=jsonschema.Draft7Validator)
    try:
        validator.check_schema(document)
    except jsonschema.exceptions.SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "(root)"
        raise InvalidSchema(f"Invalid JSON schema at {where}: {one_line(e)}") from e
    specification = referencing.jsonschema.specification_with(
        validator.META_SCHEMA["$schema"], default=referencing.jsonschema.DRAFT7
    )
    resources = [
        (name, specification.create_resource(_load(ref_text, f"reference {name!r}: ")))
        for name, ref_text in references.items()
    ]
    root = specification.create_resource(document)
    registry: referencing.Registry[Any] = referencing.Registry().with_resources(resources)
    base_uri = root.id() or ""
    registry = registry.with_resource(base_uri, root)
    resolver = registry.resolver(base_uri=base_uri)
    _check_refs(document, resolver, specification, 0)
    if normalize:
        canonical = json.dumps(document, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    else:
        canonical = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    return ParsedSchema("JSON", canonical, JsonParsed(document, resolver))


def _load(text: str, where: str) -> Any:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidSchema(f"Invalid JSON schema: {where}not JSON: {e}") from e
    if not isinstance(document, dict | bool):
        raise InvalidSchema(f"Invalid JSON schema: {where}a schema is a JSON object or a boolean")
    return document


def _check_refs(node: Any, resolver: Resolver[Any], spec: referencing.Specification[Any], depth: int) -> None:
    """Every `$ref` under `node` resolves; InvalidSchema naming the first that does not."""
    if depth > MAX_DEPTH:
        raise InvalidSchema(f"Invalid JSON schema: nested deeper than {MAX_DEPTH} levels")
    if isinstance(node, list):
        for item in node:
            _check_refs(item, resolver, spec, depth + 1)
        return
    if not isinstance(node, dict):
        return
    if isinstance(node.get("$id"), str) and depth > 0:
        resolver = resolver.in_subresource(spec.create_resource(node))
    ref = node.get("$ref")
    if isinstance(ref, str):
        try:
            resolver.lookup(ref)
        except referencing.exceptions.Unresolvable as e:
            raise InvalidSchema(
                f"Invalid JSON schema: $ref {ref!r} does not resolve (a schema elsewhere must be "
                "given as a reference named by that URL)"
            ) from e
    for key, value in node.items():
        if key not in ("enum", "const", "default", "examples"):
            _check_refs(value, resolver, spec, depth + 1)


def resolve(parsed: JsonParsed, resolver: Resolver[Any], node: Any) -> tuple[Any, Any]:
    """`node` with its `$ref` followed (repeatedly), and the resolver for what it points into."""
    for _ in range(MAX_DEPTH):
        if not (isinstance(node, dict) and isinstance(node.get("$ref"), str)):
            return node, resolver
        resolved = resolver.lookup(node["$ref"])
        node, resolver = resolved.contents, resolved.resolver
    raise InvalidSchema("Invalid JSON schema: a $ref chain does not end")
