"""The schema walk that checks a request before kio decodes it (`check_bounds`).

kio's native reader sizes arrays by their declared length before reading them: a
20-byte body declaring a 2^35-element array makes it allocate tens of GB and abort
the whole process (Rust's out-of-memory handler), and a 2^31 one reserves 16 GB. So
before kio sees a request, `check_bounds` walks it with the same schema, without
building anything: every string and byte length must fit in what is left of the
frame, every array count must fit too (count x the smallest possible element), null
markers must be valid (a null where the schema says not nullable is refused, as Kafka's
generated parsers refuse it, so no handler ever sees None there), arrays named in
`agent.protocol.request_limits` hold at most their limit (checked on the count, before any item is
walked), and tagged fields known to the schema are walked inside their declared size. The
walk is linear in the request and allocates nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from skiff.agent.protocol.request_limits import array_limit
from skiff.fileformat.varint import MAX_VARINT_BYTES, VarintError
from skiff.fileformat.varint import read_uvarint as _read_uvarint


class ProtocolError(Exception):
    """The peer broke the protocol; the connection must be closed."""


class MalformedRequest(ProtocolError):
    """A request's header or body could not be parsed."""


class RequestLimitExceeded(MalformedRequest):
    """A request array holds more items than `agent.protocol.request_limits` allows."""


def strip_optional(tp: Any) -> tuple[Any, bool]:
    """(T, True) for `T | None`, else (tp, False)."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = len(args) < len(typing.get_args(tp))
        if len(args) == 1:
            return args[0], optional
    return tp, False


_Check = Callable[[bytes | bytearray | memoryview, int, int], int]  # (buf, pos, end) -> new pos

_FIXED_SIZES = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "uuid": 16,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uint8": 1,
}


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int, end: int | None = None) -> tuple[int, int]:
    """An unsigned varint (at most 5 bytes, before `end`) at `pos`: (value, next position).

    `fileformat.varint.read_uvarint` with the protocol's error: MalformedRequest."""
    try:
        return _read_uvarint(buf, pos, MAX_VARINT_BYTES, end)
    except VarintError as exc:
        raise MalformedRequest(str(exc)) from None


def _need(pos: int, n: int, end: int, what: str) -> int:
    if n < 0 or pos + n > end:
        raise MalformedRequest(f"{what} of {n} bytes exceeds the {end - pos} bytes left")
    return pos + n


def _fixed(n: int) -> _Check:
    def check(buf: bytes | bytearray | memoryview, pos: int, end: int) -> int:
        return _need(pos, n, end, "field")

    return check


def _null(name: str) -> MalformedRequest:
    return MalformedRequest(f"non-nullable field {name} was serialized as null")


def _length_prefixed(flexible: bool, wide: bool, nullable: bool, name: str) -> _Check:
    """A string (int16 length) or bytes (int32 length), or their compact (uvarint) forms."""

    def check(buf: bytes | bytearray | memoryview, pos: int, end: int) -> int:
        if flexible:
            v, pos = read_uvarint(buf, pos, end)
            if v == 0:
                if not nullable:
                    raise _null(name)
                return pos
            return _need(pos, v - 1, end, "string")
        width = 4 if wide else 2
        pos = _need(pos, width, end, "length")
        n = int.from_bytes(buf[pos - width : pos], "big", signed=True)
        if n == -1:
            if not nullable:
                raise _null(name)
            return pos
        if n < -1:
            raise MalformedRequest(f"negative length {n}")
        return _need(pos, n, end, "string")

    return check


def _array_count(buf: bytes | bytearray | memoryview, pos: int, end: int, flexible: bool) -> tuple[int, int]:
    """(item count, -1 for null; the position after the length) of an array: a compact
    array's unsigned varint is count + 1, a classic one's int32 is the count."""
    if flexible:
        v, pos = read_uvarint(buf, pos, end)
        return v - 1, pos
    pos = _need(pos, 4, end, "array length")
    count = int.from_bytes(buf[pos - 4 : pos], "big", signed=True)
    if count < -1:
        raise MalformedRequest(f"negative array length {count}")
    return count, pos


def _array(
    flexible: bool,
    item: _Check,
    item_min: int,
    item_fixed: int | None,
    nullable: bool,
    name: str,
    max_items: int | None,
) -> _Check:
    def check(buf: bytes | bytearray | memoryview, pos: int, end: int) -> int:
        count, pos = _array_count(buf, pos, end, flexible)
        if count == -1:
            if not nullable:
                raise _null(name)
            return pos
        if max_items is not None and count > max_items:
            raise RequestLimitExceeded(f"{name} has {count} items, over the limit of {max_items}")
        if count * max(item_min, 1) > end - pos:
            raise MalformedRequest(f"array of {count} items cannot fit in {end - pos} bytes")
        if item_fixed is not None:
            return pos + count * item_fixed
        for _ in range(count):
            pos = item(buf, pos, end)
        return pos

    return check


@dataclass(frozen=True, slots=True)
class _BoundsPlan:
    fields: tuple[_Check, ...]
    tagged: dict[int, _Check]
    flexible: bool
    min_size: int


def _field_check(owner: type[Any], field: dataclasses.Field[Any], flexible: bool) -> tuple[_Check, int]:
    """(check, minimum encoded size) of one field."""
    tp, optional = strip_optional(field.type)
    name = f"{owner.__name__}.{field.name}"
    kafka_type = field.metadata.get("kafka_type", "")
    is_array = typing.get_origin(tp) is tuple
    inner = typing.get_args(tp)[0] if is_array else tp
    inner, inner_optional = strip_optional(inner)
    item_nullable = inner_optional if is_array else optional
    item: _Check
    if dataclasses.is_dataclass(inner) and isinstance(inner, type):
        nested = _bounds_plan(cast(Any, inner))
        item, item_min, item_fixed = _entity_check(inner), nested.min_size, None
        if optional and not is_array:  # KIP-893 nullable struct: int8 marker, then the struct
            marker_then = item

            def item(buf: bytes | bytearray | memoryview, pos: int, end: int) -> int:
                pos = _need(pos, 1, end, "null marker")
                marker = buf[pos - 1]
                if marker == 0xFF:
                    return pos
                if marker != 1:
                    raise MalformedRequest(f"bad null marker {marker}")
                return marker_then(buf, pos, end)

            item_min = 1
    elif kafka_type in _FIXED_SIZES:
        item_fixed = _FIXED_SIZES[kafka_type]
        item, item_min = _fixed(item_fixed), item_fixed
    elif kafka_type in ("string", "bytes", "records"):
        item = _length_prefixed(flexible, kafka_type != "string", item_nullable, name)
        item_min, item_fixed = (1 if flexible else (2 if kafka_type == "string" else 4)), None
    else:
        raise TypeError(f"no bounds check for kafka type {kafka_type!r} ({field.name})")
    if is_array:
        limit = array_limit(int(getattr(owner, "__api_key__", -1)), owner.__name__, field.name)
        array = _array(flexible, item, item_min, item_fixed, optional, name, limit)
        return array, (1 if flexible else 4)
    return item, item_min


@functools.cache
def _bounds_plan(cls: type[Any]) -> _BoundsPlan:
    flexible = bool(getattr(cls, "__flexible__", False))
    checks: list[_Check] = []
    tagged: dict[int, _Check] = {}
    min_size = 1 if flexible else 0
    for f in dataclasses.fields(cls):
        check, size = _field_check(cls, f, flexible)
        tag = f.metadata.get("tag")
        if tag is None:
            checks.append(check)
            min_size += size
        else:
            tagged[int(tag)] = check
    return _BoundsPlan(tuple(checks), tagged, flexible, min_size)


def _entity_check(cls: Any) -> _Check:
    def check(buf: bytes | bytearray | memoryview, pos: int, end: int) -> int:
        plan = _bounds_plan(cls)
        for field_check in plan.fields:
            pos = field_check(buf, pos, end)
        if plan.flexible:
            count, pos = read_uvarint(buf, pos, end)
            if count > end - pos:
                raise MalformedRequest(f"{count} tagged fields cannot fit in {end - pos} bytes")
            for _ in range(count):
                tag, pos = read_uvarint(buf, pos, end)
                size, pos = read_uvarint(buf, pos, end)
                tag_end = _need(pos, size, end, "tagged field")
                known = plan.tagged.get(tag)
                if known is not None and known(buf, pos, tag_end) != tag_end:
                    raise MalformedRequest(f"tagged field {tag} does not fill its {size} bytes")
                pos = tag_end
        return pos

    return check


def check_bounds(cls: type[Any], data: bytes | bytearray | memoryview, offset: int = 0) -> int:
    """Walk an encoded `cls` at `offset` without decoding it: where it ends, or MalformedRequest."""
    return _entity_check(cast(Any, cls))(data, offset, len(data))
