"""JSON Schema compatibility by the rules Confluent documents (its json/diff package).

The old (writer) schema is diffed against the new (reader) one; every difference has a type,
and the change is compatible when every type is in `COMPATIBLE` (Confluent's strict set). A
schema is classified first, as Confluent's parser (everit) does: `true`/`{}` is *empty*,
`false` is *false*, a `type` gives a typed part (a list of types is an `anyOf` of them, without
`type` the keywords present imply it), `enum`, `const`, `not`, `allOf`/`anyOf`/`oneOf` each give
a part, and several parts are an `allOf` of them. `$ref` is followed (references included).

Rules covered, by what changed (old -> new), each a row of the tables below:
- types: different types are TYPE_CHANGED, except from `false` or to empty; integer -> number
  widens (TYPE_EXTENDED), number -> integer narrows. A combined schema against a single one:
  new `anyOf`/`oneOf` holding a compatible branch (SUM_TYPE_EXTENDED), old `allOf` holding one
  (PRODUCT_TYPE_NARROWED), one-element combinations unwrapped.
- combined vs combined: criterion changes (to `anyOf`, or between singletons, extended, else
  changed), branches added/removed, branches matched one-to-one by compatibility (maximum
  bipartite matching), unmatched branches are COMBINED_TYPE_SUBSCHEMAS_CHANGED.
- limits: maxLength, minLength, maximum, minimum, exclusiveMaximum, exclusiveMinimum,
  maxProperties, minProperties, maxItems, minItems, maxContains, minContains (added, removed,
  increased, decreased: relaxing is compatible, tightening is not); multipleOf (a multiple of
  the old one is not compatible, a divisor is); pattern (removed is compatible only).
- objects: properties added or removed under open, closed and partially open content models
  (additionalProperties / patternProperties), required added (compatible only with a default)
  or removed, additionalProperties added/removed/narrowed/extended, dependencies.
- arrays: items, tuple items (prefixItems / items as a list) under open, closed and partially
  open content models (additionalItems), additionalItems, uniqueItems.
- enum (extended compatible; narrowed or changed not), const changed, not (narrowed, extended).
Not covered: unevaluatedProperties/unevaluatedItems, Confluent's lenient policy and its
`connect.type: bytes` exception. Titles, descriptions, ids and defaults never matter.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from skiff.metadata.schemas.formats import json_diff_text as text
from skiff.metadata.schemas.formats import json_objects
from skiff.metadata.schemas.formats.json_format import MAX_DEPTH, JsonParsed, resolve

COMPATIBLE = text.COMPATIBLE
_CRITERIA = ("allOf", "anyOf", "oneOf")
# keyword -> the kind of schema it implies when there is no "type" (everit's inference)
_IMPLIED = {
    **dict.fromkeys(
        (
            "properties",
            "required",
            "additionalProperties",
            "patternProperties",
            "minProperties",
            "maxProperties",
            "dependencies",
            "propertyNames",
        ),
        "object",
    ),
    **dict.fromkeys(
        ("items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains"),
        "array",
    ),
    **dict.fromkeys(("minLength", "maxLength", "pattern", "format"), "string"),
    **dict.fromkeys(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"), "number"),
}
_LIMITS = {
    "string": (("maxLength", "MAX_LENGTH"), ("minLength", "MIN_LENGTH")),
    "number": (
        ("maximum", "MAXIMUM"),
        ("minimum", "MINIMUM"),
        ("exclusiveMaximum", "EXCLUSIVE_MAXIMUM"),
        ("exclusiveMinimum", "EXCLUSIVE_MINIMUM"),
    ),
    "object": (("maxProperties", "MAX_PROPERTIES"), ("minProperties", "MIN_PROPERTIES")),
    "array": (
        ("maxItems", "MAX_ITEMS"),
        ("minItems", "MIN_ITEMS"),
        ("maxContains", "MAX_CONTAINS"),
        ("minContains", "MIN_CONTAINS"),
    ),
}


@dataclass
class _Node:
    """One classified schema: its kind, the raw object, and for combined ones the branches."""

    kind: str
    raw: Any
    resolver: Any
    criterion: str = ""
    subs: list[_Node] = field(default_factory=list)
    integer: bool = False


@dataclass
class _Ctx:
    path: list[str]
    active: set[tuple[int, int]]
    diffs: list[tuple[str, str]] = field(default_factory=list)

    def add(self, kind: str, *extra: str) -> None:
        self.diffs.append((kind, "#/" + "/".join([*self.path, *extra])))

    def sub(self, *extra: str) -> _Ctx:
        return _Ctx([*self.path, *extra], self.active)

    def compatible(self) -> bool:
        return all(kind in COMPATIBLE for kind, _ in self.diffs)


def check(reader: JsonParsed, writer: JsonParsed, reader_label: str, writer_label: str) -> list[str]:
    """Confluent's messages for `reader` reading what `writer` allowed; [] when compatible."""
    ctx = _Ctx([], set())
    _compare(ctx, (writer.document, writer.resolver), (reader.document, reader.resolver))
    return [
        text.describe(kind, path, reader_label, writer_label)
        for kind, path in ctx.diffs
        if kind not in COMPATIBLE
    ]


def _compare(ctx: _Ctx, original: tuple[Any, Any] | None, update: tuple[Any, Any] | None) -> None:
    if original is None or update is None:
        if original is not update:
            ctx.add("SCHEMA_ADDED" if original is None else "SCHEMA_REMOVED")
        return
    if len(ctx.path) > MAX_DEPTH:
        return
    o_raw, o_res = resolve_pair(original)
    u_raw, u_res = resolve_pair(update)
    key = (id(o_raw), id(u_raw))
    if key in ctx.active:  # a recursive schema met again: compared where it started
        return
    ctx.active.add(key)
    try:
        _compare_nodes(ctx, _classify(o_raw, o_res), _classify(u_raw, u_res))
    finally:
        ctx.active.discard(key)


def resolve_pair(pair: tuple[Any, Any]) -> tuple[Any, Any]:
    node, resolver = pair
    return resolve(JsonParsed(node, resolver), resolver, node)


def _classify(raw: Any, resolver: Any) -> _Node:
    if raw is True or raw == {}:
        return _Node("empty", raw, resolver)
    if raw is False:
        return _Node("false", raw, resolver)
    declared = raw.get("type")
    if isinstance(declared, str):
        types = [declared]
    elif isinstance(declared, list):
        types = [t for t in declared if isinstance(t, str)]
    else:
        types = sorted({_IMPLIED[k] for k in raw if k in _IMPLIED})
    typed = [_typed(t, raw, resolver) for t in dict.fromkeys(types)]
    parts = typed if len(typed) <= 1 else [_Node("combined", raw, resolver, "anyOf", typed)]
    for keyword in ("enum", "const", "not"):
        if keyword in raw:
            parts.append(_Node(keyword, raw, resolver))
    for criterion in _CRITERIA:
        if isinstance(raw.get(criterion), list):
            subs = [_classify(*resolve_pair((s, resolver))) for s in raw[criterion]]
            parts.append(_Node("combined", raw, resolver, criterion, subs))
    if not parts:
        return _Node("empty", raw, resolver)
    return parts[0] if len(parts) == 1 else _Node("combined", raw, resolver, "allOf", parts)


def _typed(kind: str, raw: Any, resolver: Any) -> _Node:
    if kind == "integer":
        return _Node("number", raw, resolver, integer=True)
    return _Node(kind, raw, resolver)


def _compare_nodes(ctx: _Ctx, o: _Node, u: _Node) -> None:
    if _one_sided_combined(ctx, o, u):
        return
    if o.kind != u.kind:
        if o.kind != "false" and u.kind != "empty":
            ctx.add("TYPE_CHANGED")
        return
    _BY_KIND.get(o.kind, _nothing)(ctx, o, u)


def _one_sided_combined(ctx: _Ctx, o: _Node, u: _Node) -> bool:
    """A combined schema against a plain one: compatible through one of its branches?"""
    if (o.kind == "combined") == (u.kind == "combined"):
        return False
    combined = u if u.kind == "combined" else o
    tries = combined.subs if len(combined.subs) == 1 else []
    marker = ""
    if len(combined.subs) > 1 and combined is u and u.criterion in ("anyOf", "oneOf"):
        tries, marker = u.subs, "SUM_TYPE_EXTENDED"
    elif len(combined.subs) > 1 and combined is o and o.criterion == "allOf":
        tries, marker = o.subs, "PRODUCT_TYPE_NARROWED"
    for branch in tries:
        sub = ctx.sub()
        _compare_nodes(sub, branch, u) if combined is o else _compare_nodes(sub, o, branch)
        if sub.compatible():
            ctx.diffs += sub.diffs
            if marker:
                ctx.add(marker)
            return True
    return False


def _nothing(ctx: _Ctx, o: _Node, u: _Node) -> None:
    return None


def _limits(ctx: _Ctx, o: _Node, u: _Node) -> None:
    for keyword, name in _LIMITS.get(o.kind, ()):
        old, new = _number(o.raw.get(keyword)), _number(u.raw.get(keyword))
        if old == new:
            continue
        if old is None or new is None:
            ctx.add(f"{name}_ADDED" if old is None else f"{name}_REMOVED", keyword)
        else:
            ctx.add(f"{name}_INCREASED" if old < new else f"{name}_DECREASED", keyword)


def _number(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None  # draft 4's boolean exclusiveMaximum is a flag, not a limit
    return Decimal(str(value))


def _string(ctx: _Ctx, o: _Node, u: _Node) -> None:
    _limits(ctx, o, u)
    old, new = o.raw.get("pattern"), u.raw.get("pattern")
    if old != new:
        ctx.add(
            "PATTERN_ADDED" if old is None else "PATTERN_REMOVED" if new is None else "PATTERN_CHANGED",
            "pattern",
        )


def _number_kind(ctx: _Ctx, o: _Node, u: _Node) -> None:
    _limits(ctx, o, u)
    old, new = _number(o.raw.get("multipleOf")), _number(u.raw.get("multipleOf"))
    if old != new:
        ctx.add(_multiple_of(old, new), "multipleOf")
    if o.integer != u.integer:
        ctx.add("TYPE_EXTENDED" if o.integer else "TYPE_NARROWED")


def _multiple_of(old: Decimal | None, new: Decimal | None) -> str:
    if old is None or new is None:
        return "MULTIPLE_OF_ADDED" if old is None else "MULTIPLE_OF_REMOVED"
    try:
        if old != 0 and new % old == 0:
            return "MULTIPLE_OF_EXPANDED"
        if new != 0 and old % new == 0:
            return "MULTIPLE_OF_REDUCED"
    except InvalidOperation:
        pass
    return "MULTIPLE_OF_CHANGED"


def _enum(ctx: _Ctx, o: _Node, u: _Node) -> None:
    old = {_key(v) for v in o.raw.get("enum") or []}
    new = {_key(v) for v in u.raw.get("enum") or []}
    if old != new:
        ctx.add(
            "ENUM_ARRAY_EXTENDED"
            if new >= old
            else "ENUM_ARRAY_NARROWED"
            if old >= new
            else "ENUM_ARRAY_CHANGED",
            "enum",
        )


def _const(ctx: _Ctx, o: _Node, u: _Node) -> None:
    if _key(o.raw.get("const")) != _key(u.raw.get("const")):
        ctx.add("ENUM_ARRAY_CHANGED", "const")


def _not(ctx: _Ctx, o: _Node, u: _Node) -> None:
    sub = ctx.sub("not")
    # reversed: what the old schema excluded, the new one must exclude too
    _compare(sub, (u.raw.get("not"), u.resolver), (o.raw.get("not"), o.resolver))
    ctx.add("NOT_TYPE_NARROWED" if sub.compatible() else "NOT_TYPE_EXTENDED", "not")


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _combined(ctx: _Ctx, o: _Node, u: _Node) -> None:
    if o.criterion != u.criterion:
        single_o, single_u = len(o.subs) == 1, len(u.subs) == 1
        extended = (
            u.criterion == "anyOf"
            or (single_o and single_u)
            or (single_o and u.criterion == "oneOf")
            or (single_u and o.criterion == "allOf")
        )
        ctx.add("COMBINED_TYPE_EXTENDED" if extended else "COMBINED_TYPE_CHANGED")
        if not extended:
            return
    olds, news = _distinct(o.subs), _distinct(u.subs)
    if len(olds) < len(news):
        ctx.add("PRODUCT_TYPE_EXTENDED" if u.criterion == "allOf" else "SUM_TYPE_EXTENDED")
    elif len(olds) > len(news):
        ctx.add("SUM_TYPE_NARROWED" if o.criterion in ("anyOf", "oneOf") else "PRODUCT_TYPE_NARROWED")
    edges: dict[tuple[int, int], list[tuple[str, str]]] = {}
    for i, old in enumerate(olds):
        for j, new in enumerate(news):
            sub = ctx.sub(f"{o.criterion}/{i}")
            _compare_nodes(sub, old, new)
            if sub.compatible():
                edges[(i, j)] = sub.diffs
    matching = _max_matching(len(olds), len(news), edges)
    for pair in sorted(matching):
        ctx.diffs += edges[pair]
    if len(matching) < min(len(olds), len(news)):
        ctx.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED")


def _distinct(nodes: list[_Node]) -> list[_Node]:
    seen: dict[str, _Node] = {}
    for node in nodes:
        seen.setdefault(f"{node.kind}:{node.criterion}:{node.integer}:{_key(node.raw)}", node)
    return list(seen.values())


def _max_matching(left: int, right: int, edges: dict[tuple[int, int], Any]) -> set[tuple[int, int]]:
    """A maximum matching of the bipartite compatibility graph (augmenting paths, Kuhn's)."""
    owner: dict[int, int] = {}  # right -> left

    def augment(i: int, seen: set[int]) -> bool:
        for j in range(right):
            if (i, j) in edges and j not in seen:
                seen.add(j)
                if j not in owner or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(left):
        augment(i, set())
    return {(i, j) for j, i in owner.items()}


def _object(ctx: _Ctx, o: _Node, u: _Node) -> None:
    json_objects.compare_object(ctx, o, u, _compare, _is_empty)
    _limits(ctx, o, u)


def _array(ctx: _Ctx, o: _Node, u: _Node) -> None:
    json_objects.compare_array(ctx, o, u, _compare, _is_empty)
    _limits(ctx, o, u)


def _is_empty(raw: Any, resolver: Any) -> bool:
    return _classify(*resolve_pair((raw, resolver))).kind == "empty"


_BY_KIND: dict[str, Callable[[_Ctx, _Node, _Node], None]] = {
    "string": _string,
    "number": _number_kind,
    "enum": _enum,
    "const": _const,
    "not": _not,
    "combined": _combined,
    "object": _object,
    "array": _array,
}
