"""JSON Schema compatibility for objects and arrays: content models (json_compat's tables).

An object's content model is *open* when any property is allowed (`additionalProperties`
absent or `true`, no `patternProperties`), *closed* when `additionalProperties` is `false`,
and *partially open* when `patternProperties` or an `additionalProperties` schema covers
properties not listed. Confluent's rules for a property present on one side only:

| change             | old model / new model   | difference (compatible?)                                   |
|--------------------|-------------------------|------------------------------------------------------------|
| property removed   | new open                | PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL (yes)             |
|                    | new partially open      | ..._IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL (yes) when the old property schema is compatible with the covering one, else ..._NOT_COVERED_... (no) |
|                    | new closed              | PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL (yes) for a `false` property, else PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL (no) |
| property added     | old open                | empty schema (yes); required with default / optional: ..._ADDED_TO_OPEN_CONTENT_MODEL (no, strict); required without default (no) |
|                    | old partially open      | covered (yes) or not covered (no), then as closed:          |
|                    | old closed              | optional or required with a default (yes); required without default (no) |

Arrays: the same for tuple items (`prefixItems`, or `items` as a list) with `additionalItems`
as the content model. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Compare = Callable[[Any, "tuple[Any, Any] | None", "tuple[Any, Any] | None"], None]
IsEmpty = Callable[[Any, Any], bool]


def compare_object(ctx: Any, o: Any, u: Any, compare: Compare, is_empty: IsEmpty) -> None:
    o_props, u_props = _dict(o.raw.get("properties")), _dict(u.raw.get("properties"))
    o_req, u_req = set(_list(o.raw.get("required"))), set(_list(u.raw.get("required")))
    for name in o_props:
        if name in u_props and (name in o_req) != (name in u_req):
            if name in o_req:
                ctx.add("REQUIRED_ATTRIBUTE_REMOVED", "required", name)
            elif _has_default(u_props[name]):
                ctx.add("REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED", "required", name)
            else:
                ctx.add("REQUIRED_ATTRIBUTE_ADDED", "required", name)
    for name in sorted(set(o_props) | set(u_props)):
        sub = ctx.sub("properties", name)
        if name not in u_props:
            _property_removed(sub, o, u, name, compare)
        elif name not in o_props:
            _property_added(sub, o, u, name, compare, is_empty)
        else:
            compare(sub, (o_props[name], o.resolver), (u_props[name], u.resolver))
        ctx.diffs += sub.diffs
    _dependencies(ctx, o, u, compare)
    _additional(ctx, o, u, "additionalProperties", "ADDITIONAL_PROPERTIES", compare)


def _property_removed(ctx: Any, o: Any, u: Any, name: str, compare: Compare) -> None:
    if _open(u.raw, "additionalProperties", patterns=True):
        ctx.add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL")
        return
    covering = _covering(u.raw, name)
    old_schema = _dict(o.raw.get("properties"))[name]
    if covering is not None:
        sub = ctx.sub()
        compare(sub, (old_schema, o.resolver), (covering, u.resolver))
        ctx.diffs += sub.diffs
        verdict = "IS_COVERED" if sub.compatible() else "NOT_COVERED"
        ctx.add(f"PROPERTY_REMOVED_{verdict}_BY_PARTIALLY_OPEN_CONTENT_MODEL")
    elif old_schema is False:
        ctx.add("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
    else:
        ctx.add("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")


def _property_added(ctx: Any, o: Any, u: Any, name: str, compare: Compare, is_empty: IsEmpty) -> None:
    new_schema = _dict(u.raw.get("properties"))[name]
    required = name in _list(u.raw.get("required"))
    if _open(o.raw, "additionalProperties", patterns=True):
        if is_empty(new_schema, u.resolver):
            ctx.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")
        elif required:
            with_default = "_WITH_DEFAULT" if _has_default(new_schema) else ""
            ctx.add(f"REQUIRED_PROPERTY{with_default}_ADDED_TO_OPEN_CONTENT_MODEL")
        else:
            ctx.add("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
        return
    covering = _covering(o.raw, name)
    if covering is not None:
        sub = ctx.sub()
        compare(sub, (covering, o.resolver), (new_schema, u.resolver))
        ctx.diffs += sub.diffs
        verdict = "IS_COVERED" if sub.compatible() else "NOT_COVERED"
        ctx.add(f"PROPERTY_ADDED_{verdict}_BY_PARTIALLY_OPEN_CONTENT_MODEL")
    if not required:
        ctx.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
    elif _has_default(new_schema):
        ctx.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL")
    else:
        ctx.add("REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")


def _dependencies(ctx: Any, o: Any, u: Any, compare: Compare) -> None:
    o_deps, u_deps = _deps(o.raw), _deps(u.raw)
    for name in sorted(set(o_deps) | set(u_deps)):
        old, new = o_deps.get(name), u_deps.get(name)
        if new is None:
            kind = "ARRAY" if isinstance(old, list) else "SCHEMA"
            ctx.add(f"DEPENDENCY_{kind}_REMOVED", "dependencies", name)
        elif old is None:
            kind = "ARRAY" if isinstance(new, list) else "SCHEMA"
            ctx.add(f"DEPENDENCY_{kind}_ADDED", "dependencies", name)
        elif isinstance(old, list) and isinstance(new, list):
            if set(old) != set(new):
                change = (
                    "EXTENDED" if set(new) >= set(old) else "NARROWED" if set(old) >= set(new) else "CHANGED"
                )
                ctx.add(f"DEPENDENCY_ARRAY_{change}", "dependencies", name)
        else:
            sub = ctx.sub("dependencies", name)
            compare(sub, (old, o.resolver), (new, u.resolver))
            ctx.diffs += sub.diffs


def _deps(raw: Any) -> dict[str, Any]:
    found = dict(_dict(raw.get("dependencies")))
    found.update(_dict(raw.get("dependentRequired")))
    found.update(_dict(raw.get("dependentSchemas")))
    return found


def compare_array(ctx: Any, o: Any, u: Any, compare: Compare, is_empty: IsEmpty) -> None:
    o_all, o_tuple, o_more = _items(o.raw)
    u_all, u_tuple, u_more = _items(u.raw)
    sub = ctx.sub("items")
    compare(
        sub, None if o_all is None else (o_all, o.resolver), None if u_all is None else (u_all, u.resolver)
    )
    ctx.diffs += sub.diffs
    for index in range(max(len(o_tuple), len(u_tuple))):
        sub = ctx.sub(f"items/{index}")
        if index < len(o_tuple) and index < len(u_tuple):
            compare(sub, (o_tuple[index], o.resolver), (u_tuple[index], u.resolver))
        elif index < len(o_tuple):
            _item_removed(sub, o_tuple[index], o, u_more, u, compare)
        else:
            _item_added(sub, u_tuple[index], u, o_more, o, compare, is_empty)
        ctx.diffs += sub.diffs
    _additional(ctx, o, u, _more_key(o.raw), "ADDITIONAL_ITEMS", compare, update_key=_more_key(u.raw))
    o_unique, u_unique = o.raw.get("uniqueItems") is True, u.raw.get("uniqueItems") is True
    if o_unique != u_unique:
        ctx.add("UNIQUE_ITEMS_REMOVED" if o_unique else "UNIQUE_ITEMS_ADDED", "uniqueItems")


def _item_removed(ctx: Any, old: Any, o: Any, u_more: Any, u: Any, compare: Compare) -> None:
    if u_more is None or u_more is True:
        ctx.add("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL")
    elif isinstance(u_more, dict):
        sub = ctx.sub()
        compare(sub, (old, o.resolver), (u_more, u.resolver))
        ctx.diffs += sub.diffs
        verdict = "IS_COVERED" if sub.compatible() else "NOT_COVERED"
        ctx.add(f"ITEM_REMOVED_{verdict}_BY_PARTIALLY_OPEN_CONTENT_MODEL")
    else:
        ctx.add(
            "ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL"
            if old is False
            else "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"
        )


def _item_added(ctx: Any, new: Any, u: Any, o_more: Any, o: Any, compare: Compare, is_empty: IsEmpty) -> None:
    if o_more is None or o_more is True:
        empty = is_empty(new, u.resolver)
        ctx.add(
            "ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL"
            if empty
            else "ITEM_ADDED_TO_OPEN_CONTENT_MODEL"
        )
    elif isinstance(o_more, dict):
        sub = ctx.sub()
        compare(sub, (o_more, o.resolver), (new, u.resolver))
        ctx.diffs += sub.diffs
        verdict = "IS_COVERED" if sub.compatible() else "NOT_COVERED"
        ctx.add(f"ITEM_ADDED_{verdict}_BY_PARTIALLY_OPEN_CONTENT_MODEL")
    else:
        ctx.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL")


def _items(raw: Any) -> tuple[Any, list[Any], Any]:
    """(schema of every item, tuple item schemas, schema of items after the tuple)."""
    if isinstance(raw.get("prefixItems"), list):
        return None, raw["prefixItems"], raw.get("items")
    items = raw.get("items")
    if isinstance(items, list):
        return None, items, raw.get("additionalItems")
    return items, [], raw.get("additionalItems")


def _more_key(raw: Any) -> str:
    return "items" if isinstance(raw.get("prefixItems"), list) else "additionalItems"


def _additional(
    ctx: Any, o: Any, u: Any, key: str, name: str, compare: Compare, update_key: str | None = None
) -> None:
    """additionalProperties / additionalItems: allowed or not, then their schemas."""
    old = o.raw.get(key) if key != "items" or "prefixItems" in o.raw else None
    new_key = update_key or key
    new = u.raw.get(new_key) if new_key != "items" or "prefixItems" in u.raw else None
    sub = ctx.sub(key if key == "additionalProperties" else "additionalItems")
    if (old is not False) != (new is not False):
        sub.add(f"{name}_ADDED" if new is not False else f"{name}_REMOVED")
    elif isinstance(new, dict) and not isinstance(old, dict):
        sub.add(f"{name}_NARROWED")
    elif isinstance(old, dict) and not isinstance(new, dict):
        sub.add(f"{name}_EXTENDED")
    elif isinstance(old, dict) and isinstance(new, dict):
        compare(sub, (old, o.resolver), (new, u.resolver))
    ctx.diffs += sub.diffs


def _open(raw: Any, key: str, *, patterns: bool) -> bool:
    if patterns and _dict(raw.get("patternProperties")):
        return False
    return raw.get(key) in (None, True)


def _covering(raw: Any, name: str) -> Any:
    """The schema that a partially open object gives an unlisted property `name`, if any."""
    for pattern, schema in _dict(raw.get("patternProperties")).items():
        try:
            if re.search(pattern, name):
                return schema
        except re.error:
            continue
    extra = raw.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def _has_default(schema: Any) -> bool:
    return isinstance(schema, dict) and "default" in schema


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
