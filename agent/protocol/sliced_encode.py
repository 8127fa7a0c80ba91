"""Encoding a large response without holding the event loop.

kio's writer is pure Python (DescribeConfigs for 10,000 topics, 26 MB: several seconds), and
the agent serves every connection on one event loop, so a large response encoded in one go
freezes every other client for as long. `encode_cost` estimates a response's cost in entities
(kio writes about one entity per 5-10 us) without walking it: a tuple of entities counts
`len(tuple)` times the cost of its first item, recursively. A response over
`SLICED_ENCODE_MIN_ENTITIES` is encoded by `encode_response_sliced` instead of
`agent.protocol.encode_response`: the same bytes, written item by item, giving the loop a
turn (`asyncio.sleep(0)`) whenever the current slice has run `slice_s`. Small entities that
appear many times as the same object (DescribeConfigs' default-valued configs) are encoded
once per response. Each item of a
large array is converted to the wire version's class just before it is written (so the
version conversion is sliced too); an item that is itself large (one topic with 100,000
partitions) is written the same way, recursively.

Why slices and not a worker thread: the encoder holds the GIL either way, and a thread
competing for it delays the loop by up to `sys.getswitchinterval()` (5 ms) at every turn
it wants the GIL back; slices bound the delay by `slice_s` and cost nothing when nobody
else is waiting (docs/benchmarks.md, "Big admin requests", measured both).

The top level mirrors kio's `entity_writer` (kio 0.6.5, pinned): the fields in declaration
order, each with kio's own field writer, then, for flexible versions, the tagged fields
(count, then tag/size/value for each non-default one, by tag). A unit test checks byte
equality with `encode_response` over several APIs and versions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import io
import time
from collections.abc import Callable
from dataclasses import MISSING
from typing import Any, cast

from kio.serial import entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import EntityTupleField, classify_field, get_field_tag
from kio.serial._serialize import get_field_writer
from kio.serial.writers import (
    write_compact_array_length,
    write_legacy_array_length,
    write_tagged_field,
    write_unsigned_varint,
)
from kio.static.primitive import i32, uvarint
from skiff.agent.protocol import SIZE_PREFIX, ByteSink, convert, response_header_version

# Responses estimated above this many entities are encoded in slices (about 10-20 ms of kio
# work on a 2-core machine; below it, one go is cheaper than the bookkeeping).
SLICED_ENCODE_MIN_ENTITIES = 2_000
# An array item estimated above this many entities is itself written in slices.
_BIG_ITEM_ENTITIES = 2_000
# Entities up to this size are encoded once per response and their bytes reused (`_write_small`).
_MEMO_MAX_ENTITIES = 8
DEFAULT_SLICE_S = 0.005


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    writer: Callable[[Any, Any], None]
    item_cls: type[Any] | None  # the item class of an array of entities, else None
    flexible: bool
    tag: int | None
    tag_default: Any


@functools.cache
def _fields(cls: Any) -> tuple[_Field, ...]:
    out = []
    flexible = bool(cls.__flexible__)
    for f in dataclasses.fields(cls):
        tag = get_field_tag(f)
        writer = get_field_writer(f, flexible=flexible, is_request_header=False, is_tag=tag is not None)
        kind = classify_field(f)
        item_cls = kind.type_ if isinstance(kind, EntityTupleField) else None
        default = get_tagged_field_default(f) if tag is not None else None
        out.append(_Field(f.name, writer, item_cls, flexible, tag, default))
    return tuple(out)


@functools.cache
def _entity_arrays(cls: Any) -> tuple[str, ...]:
    return tuple(f.name for f in _fields(cls) if f.item_cls is not None)


def encode_cost(entity: Any, depth: int = 0) -> int:
    """Estimated entities in `entity`: 1 + for each array of entities its length times the
    cost of its first item (the items of one array are alike in practice)."""
    cost = 1
    if depth > 8:
        return cost
    for name in _entity_arrays(cast(Any, type(entity))):
        items = getattr(entity, name)
        if items:
            cost += len(items) * encode_cost(items[0], depth + 1)
    return cost


class _Slicer:
    """Yields to the loop once the current slice has run `slice_s`; counts the yields."""

    def __init__(self, slice_s: float, clock: Callable[[], float]) -> None:
        self.slice_s = slice_s
        self.clock = clock
        self.slice_end = clock() + slice_s
        self.yields = 0

    async def tick(self) -> None:
        if self.clock() >= self.slice_end:
            await asyncio.sleep(0)
            self.yields += 1
            self.slice_end = self.clock() + self.slice_s


async def _write(out: ByteSink, entity: Any, cls: type[Any], slicer: _Slicer, memo: _Memo) -> None:
    """Write `entity` (any version of `cls`'s message) as `cls`, large arrays in slices."""
    if type(entity) is not cls:
        entity = _shallow_convert(entity, cls)
    fields = _fields(cast(Any, cls))
    for f in fields:
        if f.tag is not None:
            continue
        value = getattr(entity, f.name)
        if f.item_cls is None or not value:  # a value, or an empty or null array
            f.writer(out, value)
            continue
        _array_length(out, f, len(value))
        item_cls = f.item_cls
        for item in value:
            if encode_cost(item) > _BIG_ITEM_ENTITIES:
                await _write(out, item, item_cls, slicer, memo)
            else:
                _write_small(out, item, item_cls, memo)
            await slicer.tick()
    if cls.__flexible__:
        _write_tagged(out, entity, fields)


# (id of the source entity, wire class) -> (the entity, kept alive so that its id is not
# reused during the encoding; its bytes)
_Memo = dict[tuple[int, type[Any]], tuple[Any, bytes]]


def _write_small(out: ByteSink, entity: Any, cls: type[Any], memo: _Memo) -> None:
    """Write `entity` as `cls` in one go. Small entities are encoded once per response and
    their bytes reused where the same object appears again (DescribeConfigs shares the
    entities of default-valued configs across all topics); larger ones are written field by
    field so that the small ones inside them are found."""
    if encode_cost(entity) <= _MEMO_MAX_ENTITIES:
        key = (id(entity), cls)
        hit = memo.get(key)
        if hit is None:
            buf = ByteSink()
            entity_writer(cls)(cast(Any, buf), convert(entity, cls))
            hit = memo[key] = (entity, bytes(buf))
        out.extend(hit[1])
        return
    if type(entity) is not cls:
        entity = _shallow_convert(entity, cls)
    fields = _fields(cast(Any, cls))
    for f in fields:
        if f.tag is not None:
            continue
        value = getattr(entity, f.name)
        if f.item_cls is None or not value:
            f.writer(out, value)
            continue
        _array_length(out, f, len(value))
        for item in value:
            _write_small(out, item, f.item_cls, memo)
    if cls.__flexible__:
        _write_tagged(out, entity, fields)


def _array_length(out: Any, f: _Field, n: int) -> None:
    if f.flexible:
        write_compact_array_length(out, n)
    else:
        write_legacy_array_length(out, i32(n))


def _write_tagged(out: Any, entity: Any, fields: tuple[_Field, ...]) -> None:
    """kio's tagged-field section: the count, then each non-default field by tag order."""
    tagged = sorted((f for f in fields if f.tag is not None), key=lambda f: f.tag or 0)
    count = 0
    with io.BytesIO() as buf:
        for f in tagged:
            value = getattr(entity, f.name)
            default = _declared_default(cast(Any, type(entity)), f.name)
            if value == default or (default is MISSING and value == f.tag_default):
                continue
            write_tagged_field(buffer=buf, tag=uvarint(f.tag or 0), writer=f.writer, value=value)
            count += 1
        write_unsigned_varint(out, uvarint(count))
        out.write(buf.getvalue())


@functools.cache
def _declared_default(cls: Any, name: str) -> Any:
    return {f.name: f.default for f in dataclasses.fields(cls)}[name]


def _shallow_convert(entity: Any, cls: type[Any]) -> Any:
    """`entity` as `cls` (`agent.protocol.convert`), except that its arrays of entities keep
    the source's items (they are converted one by one as they are written)."""
    arrays = [n for n in _entity_arrays(cast(Any, cls)) if hasattr(entity, n)]
    if not arrays:
        return convert(entity, cls)
    rest = convert(dataclasses.replace(entity, **{n: () for n in arrays}), cls)
    return dataclasses.replace(rest, **{n: getattr(entity, n) for n in arrays})


async def encode_response_sliced(
    correlation_id: int,
    response: Any,
    wire_cls: type[Any] | None = None,
    slice_s: float = DEFAULT_SLICE_S,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[bytearray, int]:
    """(the frame `encode_response` would give for `response` written as `wire_cls`, the
    number of times the loop was given a turn)."""
    cls = type(response) if wire_cls is None else wire_cls
    header_version = response_header_version(cls.__api_key__, cls.__version__)
    out = ByteSink(b"\0\0\0\0")
    out.extend(correlation_id.to_bytes(4, "big", signed=True))
    if header_version >= 1:
        out.append(0)  # no tagged fields in the response header
    slicer = _Slicer(slice_s, clock)
    await _write(out, response, cls, slicer, {})
    out[0:SIZE_PREFIX] = (len(out) - SIZE_PREFIX).to_bytes(4, "big", signed=True)
    return out, slicer.yields
