"""Kafka wire protocol: framing, request/response headers, version lookup, entity conversion.

Framing. Every request and response is `int32 size` followed by `size` bytes. A request
is a header and a body; a response is a header and a body, the body's schema being the
response of the request's API at the request's version.

Request header (all big-endian):

    v0: api_key int16 | api_version int16 | correlation_id int32
    v1: v0 + client_id (nullable legacy string: int16 length, -1 = null)
    v2: v1 + tagged fields (flexible versions)

Response header:

    v0: correlation_id int32
    v1: v0 + tagged fields (flexible versions)

Which header version goes with which request is fixed by the API's "flexible versions":
a request version is flexible when its body uses compact strings/arrays and tagged
fields, and then its request header is v2 and its response header v1. kio's generated
schemas carry this as `__header_schema__`; `request_header_version` and
`response_header_version` read it, falling back to the nearest known version for
versions kio does not know (flexibility never goes away once introduced). The one
exception is ApiVersions, whose *response* header is always v0 so that a client that
spoke a too-new version can still read the answer (KIP-511).

Tagged fields (flexible versions): an unsigned varint count, then for each field
`uvarint tag | uvarint size | size bytes`. Request headers' tagged fields are parsed and
ignored; kio writes a tagged field only when its value differs from its default, which
matters (librdkafka 2.0 rejects responses carrying default-valued tags it does not know).

Entity conversion. Handlers are written once against the newest version of an API's
kio classes; `convert` copies an entity into another version's classes field by field,
by name, recursively: fields the target lacks are dropped (they do not exist on the
wire at that version), fields the source lacks take the target's default or the Kafka
zero value (0, "", false, empty array, null for nullable fields). `error_response`
builds the zero response of an API version with its top-level error code set.

Before kio decodes a request body, `agent.protocol.schema_walk.check_bounds` walks it (lengths that fit,
nulls only where the schema allows them, array sizes within `agent.protocol.request_limits`).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import logging
import struct
import typing
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

# The schema walk and its errors live in agent.protocol.schema_walk; importers keep using these names here.
from skiff.agent.protocol.schema_walk import MalformedRequest as MalformedRequest
from skiff.agent.protocol.schema_walk import ProtocolError as ProtocolError
from skiff.agent.protocol.schema_walk import RequestLimitExceeded as RequestLimitExceeded
from skiff.agent.protocol.schema_walk import check_bounds as check_bounds
from skiff.agent.protocol.schema_walk import read_uvarint as read_uvarint
from skiff.agent.protocol.schema_walk import strip_optional as _strip_optional

API_VERSIONS_KEY = 18
SIZE_PREFIX = 4
MIN_REQUEST_HEADER_BYTES = 8  # api_key + api_version + correlation_id

_HEADER_PREFIX = struct.Struct(">hhi")
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")

E = TypeVar("E")

log = logging.getLogger(__name__)


class UnknownApiKey(ProtocolError):
    """A request for an API key this agent does not serve."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int


# --- version lookup ---------------------------------------------------------------------


def api_name(api_key: int) -> str | None:
    return api_key_map.get(api_key)


@functools.cache
def kio_version_range(api_key: int) -> tuple[int, int] | None:
    """The (min, max) versions kio has schemas for, or None for an API kio does not know."""
    name = api_key_map.get(api_key)
    if name is None:
        return None
    versions = [v for v, types_ in schema_name_map[name].items() if EntityType.request in types_]
    if not versions:
        return None
    return min(versions), max(versions)


@functools.cache
def request_schema(api_key: int, api_version: int) -> type[Any] | None:
    rng = kio_version_range(api_key)
    if rng is None or not rng[0] <= api_version <= rng[1]:
        return None
    return load_request_schema(api_key, api_version)


@functools.cache
def response_schema(api_key: int, api_version: int) -> type[Any] | None:
    rng = kio_version_range(api_key)
    if rng is None or not rng[0] <= api_version <= rng[1]:
        return None
    return load_response_schema(api_key, api_version)


@functools.cache
def request_header_version(api_key: int, api_version: int) -> int:
    """Request header version (1 or 2) for a request; nearest known version if unknown."""
    rng = kio_version_range(api_key)
    if rng is None:
        return 1
    v = min(max(api_version, rng[0]), rng[1])
    cls = request_schema(api_key, v)
    assert cls is not None
    return int(cls.__header_schema__.__version__)


@functools.cache
def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    rng = kio_version_range(api_key)
    if rng is None:
        return 0
    v = min(max(api_version, rng[0]), rng[1])
    cls = response_schema(api_key, v)
    assert cls is not None
    return int(cls.__header_schema__.__version__)


# --- reading ----------------------------------------------------------------------------


def skip_tagged_fields(buf: bytes | bytearray | memoryview, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise MalformedRequest("truncated tagged field")
    return pos


def peek_header_prefix(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id): the fixed first 8 bytes of every request."""
    if len(frame) < MIN_REQUEST_HEADER_BYTES:
        raise MalformedRequest(f"request of {len(frame)} bytes is shorter than a request header")
    key, version, corr = _HEADER_PREFIX.unpack_from(frame, 0)
    return key, version, corr


def parse_request_header(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, int]:
    """Parse the request header at the start of `frame`: (header, offset of the body)."""
    api_key, api_version, correlation_id = peek_header_prefix(frame)
    hv = request_header_version(api_key, api_version)
    pos = MIN_REQUEST_HEADER_BYTES
    client_id: str | None = None
    if hv >= 1:
        if pos + 2 > len(frame):
            raise MalformedRequest("truncated client_id length")
        (n,) = _INT16.unpack_from(frame, pos)
        pos += 2
        if n >= 0:
            if pos + n > len(frame):
                raise MalformedRequest("truncated client_id")
            try:
                client_id = bytes(frame[pos : pos + n]).decode("utf-8")
            except UnicodeDecodeError:
                raise MalformedRequest("client_id is not valid UTF-8") from None
            pos += n
        elif n != -1:
            raise MalformedRequest(f"negative client_id length {n}")
    if hv >= 2:
        if pos < len(frame) and frame[pos] == 0:  # no tagged fields (what clients send)
            pos += 1
        else:
            pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, hv), pos


def decode_request_body(header: RequestHeader, frame: bytes | bytearray | memoryview, offset: int) -> Any:
    """The request body as the kio entity of its API version; MalformedRequest if it does not parse."""
    cls = request_schema(header.api_key, header.api_version)
    if cls is None:
        raise MalformedRequest(f"no schema for api {header.api_key} v{header.api_version}")
    return decode_entity(cls, frame, offset, allow_trailing=True)


def decode_entity(
    cls: type[E], data: bytes | bytearray | memoryview, offset: int = 0, allow_trailing: bool = False
) -> E:
    """Decode one entity at `offset`; MalformedRequest if it does not parse.

    The bytes are first walked by `check_bounds` (see there: kio's native reader trusts
    declared array lengths). Bytes left over after the entity are an error unless
    `allow_trailing`: Kafka ignores them in requests (it never checks that a request
    body was consumed), and librdkafka 2.16 does send a few after some Metadata v12
    requests, so requests must tolerate them.
    """
    end = check_bounds(cls, data, offset)
    try:
        entity, size = entity_reader(cast(Any, cls))(data, offset)
    except Exception as e:  # boundary: untrusted bytes
        # kio raises DecodeError, ValueError, UnicodeDecodeError, OverflowError, ...
        raise MalformedRequest(f"cannot decode {cls.__name__}: {type(e).__name__}: {e}") from None
    if offset + size != end:
        raise MalformedRequest(f"{cls.__name__}: kio read {size} bytes, the bounds check {end - offset}")
    trailing = len(data) - end
    if trailing:
        if not allow_trailing:
            raise MalformedRequest(f"{trailing} trailing bytes after {cls.__name__}")
        log.debug("ignoring %d trailing bytes after %s", trailing, cls.__name__)
    return cast(E, entity)


# --- writing ----------------------------------------------------------------------------


class ByteSink(bytearray):
    """A growable buffer with a file-like `write`, which kio's writers need."""

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self.extend(data)
        return len(data)


def encode_response(correlation_id: int, response: Any, header_version: int | None = None) -> bytearray:
    """A complete response frame: size prefix, response header, body."""
    if header_version is None:
        header_version = response_header_version(response.__api_key__, response.__version__)
    out = ByteSink(b"\0\0\0\0")
    out.extend(_INT32.pack(correlation_id))
    if header_version >= 1:
        out.append(0)  # no tagged fields in the response header
    entity_writer(type(response))(cast(Any, out), response)
    _INT32.pack_into(out, 0, len(out) - SIZE_PREFIX)
    return out


def encode_request(
    body: Any,
    correlation_id: int,
    client_id: str | None = "skiff",
    api_version: int | None = None,
    header_version: int | None = None,
) -> bytes:
    """A complete request frame (for tests and tools): size prefix, header, body.

    `api_version`/`header_version` default to the body's own; overriding them writes a
    header that lies about the body, which is what protocol tests want.
    """
    key = int(body.__api_key__)
    version = int(body.__version__) if api_version is None else api_version
    hv = request_header_version(key, version) if header_version is None else header_version
    out = ByteSink(b"\0\0\0\0")
    out.extend(_HEADER_PREFIX.pack(key, version, correlation_id))
    if hv >= 1:
        if client_id is None:
            out.extend(_INT16.pack(-1))
        else:
            raw = client_id.encode("utf-8")
            out.extend(_INT16.pack(len(raw)))
            out.extend(raw)
    if hv >= 2:
        out.append(0)
    entity_writer(type(body))(cast(Any, out), body)
    _INT32.pack_into(out, 0, len(out) - SIZE_PREFIX)
    return bytes(out)


def decode_response(frame: bytes, response_cls: type[E], header_version: int | None = None) -> tuple[int, E]:
    """(correlation_id, body) of a response frame without its size prefix (for tests and tools)."""
    api_key = int(cast(Any, response_cls).__api_key__)
    version = int(cast(Any, response_cls).__version__)
    hv = response_header_version(api_key, version) if header_version is None else header_version
    (corr,) = _INT32.unpack_from(frame, 0)
    pos = 4
    if hv >= 1:
        pos = skip_tagged_fields(frame, pos)
    return corr, decode_entity(response_cls, frame, pos)


# --- error codes ------------------------------------------------------------------------


def to_error_code(code: int) -> ErrorCode:
    """kio's ErrorCode for an int (kio's writer needs the enum); unknown codes -> UNKNOWN_SERVER_ERROR."""
    if isinstance(code, ErrorCode):
        return code
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.unknown_server_error


# --- entity conversion ------------------------------------------------------------------

_VALUE, _ENTITY, _ENTITY_TUPLE = 0, 1, 2


@dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    kind: int
    nested: type[Any] | None
    has_default: bool
    zero: Callable[[], Any]


_ZERO_BY_KAFKA_TYPE: dict[str, Callable[[], Any]] = {
    "string": lambda: "",
    "bytes": lambda: b"",
    "records": lambda: b"",
    "bool": lambda: False,
    "uuid": lambda: None,
    "error_code": lambda: ErrorCode.none,
    "timedelta_i32": lambda: datetime.timedelta(0),
    "timedelta_i64": lambda: datetime.timedelta(0),
    "datetime_i64": lambda: datetime.datetime.fromtimestamp(0, tz=datetime.UTC),
    "float64": lambda: 0.0,
}


@functools.cache
def _plan(cls: type[Any]) -> tuple[_FieldPlan, ...]:
    hints = typing.get_type_hints(cls)
    plans = []
    for f in dataclasses.fields(cls):
        tp, optional = _strip_optional(hints[f.name])
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        origin = typing.get_origin(tp)
        nested: type[Any] | None = None
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            kind, nested = _ENTITY, tp
            zero: Callable[[], Any] = (lambda: None) if optional else functools.partial(zero_entity, tp)
        elif origin is tuple:
            inner = typing.get_args(tp)[0]
            if dataclasses.is_dataclass(inner) and isinstance(inner, type):
                kind, nested = _ENTITY_TUPLE, inner
            else:
                kind = _VALUE
            zero = tuple
        else:
            kind = _VALUE
            if optional:
                zero = lambda: None  # noqa: E731
            else:
                zero = _ZERO_BY_KAFKA_TYPE.get(f.metadata.get("kafka_type", ""), lambda: 0)
        plans.append(_FieldPlan(f.name, kind, nested, has_default, zero))
    return tuple(plans)


def zero_entity(cls: type[E]) -> E:
    """An instance of `cls` with every field at its default or Kafka zero value."""
    kwargs = {p.name: p.zero() for p in _plan(cast(Any, cls)) if not p.has_default}
    return cls(**kwargs)


def convert(entity: Any, target_cls: type[E]) -> E:
    """Copy `entity` into `target_cls` (another version of the same message), by field name."""
    if type(entity) is target_cls:
        return entity
    kwargs: dict[str, Any] = {}
    for p in _plan(cast(Any, target_cls)):
        if hasattr(entity, p.name):
            value = getattr(entity, p.name)
            if value is not None and p.nested is not None:
                if p.kind == _ENTITY:
                    value = convert(value, p.nested)
                else:
                    value = tuple(convert(item, p.nested) for item in value)
            kwargs[p.name] = value
        elif not p.has_default:
            kwargs[p.name] = p.zero()
    return target_cls(**kwargs)


def top_level_error_field(cls: type[Any]) -> str | None:
    for f in dataclasses.fields(cls):
        if f.metadata.get("kafka_type") == "error_code":
            return f.name
    return None


def error_response(api_key: int, api_version: int, code: int) -> Any | None:
    """The zero response of an API version with its top-level error code set.

    None when kio has no schema for that version, or when the response has no
    top-level error code (so an error cannot be expressed without per-item results).
    """
    cls = response_schema(api_key, api_version)
    if cls is None:
        return None
    name = top_level_error_field(cls)
    if name is None:
        return None
    return dataclasses.replace(zero_entity(cls), **{name: to_error_code(code)})


def uuid_or_none(value: uuid.UUID | None) -> uuid.UUID | None:
    """kio reads the all-zero UUID as None or as UUID(int=0) depending on the path; normalize."""
    if value is None or value.int == 0:
        return None
    return value
