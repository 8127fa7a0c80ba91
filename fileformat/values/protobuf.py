"""Protobuf: the reader message's Arrow type, and payloads parsed by protobuf's message
classes (built at run time from descriptors: no generated code).

Schemas arrive as the registry's `format=serialized` text, the base64 of a
`FileDescriptorProto`, with each import as a reference of the same form; the well-known
google/protobuf files come from the protobuf package itself. The reader's message is the one
named (by full name, `package.Outer.Inner`), else the first message of the reader schema's
file (message index [0]).

Resolution is Protobuf's own: a body written with any version of the message is parsed with
the reader's class (fields matched by number; unknown ones dropped, missing ones default),
so a writer schema is used only to check that the record's message indexes name the
reader's message (by full name); a record of another message type is an error row.

Types: double -> float64; float -> float32; int32, sint32, sfixed32 -> int32; uint32,
fixed32, int64, sint64, sfixed64, uint64, fixed64 -> int64 (a uint64 above 2^63-1 makes an
error row); bool -> bool; string -> string; bytes -> binary; enum -> string (its name; an
unknown number as digits); message -> struct; repeated -> list; map<k, v> -> map<k, v>;
google.protobuf.Timestamp -> timestamp[us, UTC]; the wrappers (StringValue, Int64Value ...)
-> their value, null when unset. A field with presence (a message, a oneof member, proto2 or
proto3 `optional`) is null when unset; other scalars read their default, as Protobuf does.
A recursive message (google.protobuf.Struct among them) has no Arrow form (refused).

Cost: upb parses each body in C, but reading its fields into a dict is Python attribute
access per field (protobuf has no columnar output), converted to Arrow by `rows.assemble`.
"""

from __future__ import annotations

import base64
import binascii
import importlib
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message
from skiff.fileformat.values.model import PROTOBUF, SchemaError, SchemaSource
from skiff.fileformat.values.rows import RowDecoder

_WELL_KNOWN: tuple[str, ...] = ("any", "api", "descriptor", "duration", "empty", "field_mask")
_WELL_KNOWN += ("source_context", "struct", "timestamp", "type", "wrappers")
TIMESTAMP = "google.protobuf.Timestamp"
WRAPPERS: dict[str, pa.DataType] = {
    "google.protobuf.DoubleValue": pa.float64(),
    "google.protobuf.FloatValue": pa.float32(),
    "google.protobuf.Int64Value": pa.int64(),
    "google.protobuf.UInt64Value": pa.int64(),
    "google.protobuf.Int32Value": pa.int32(),
    "google.protobuf.UInt32Value": pa.int64(),
    "google.protobuf.BoolValue": pa.bool_(),
    "google.protobuf.StringValue": pa.string(),
    "google.protobuf.BytesValue": pa.binary(),
}
_T = FieldDescriptor
SCALARS: dict[int, pa.DataType] = {
    _T.TYPE_DOUBLE: pa.float64(),
    _T.TYPE_FLOAT: pa.float32(),
    _T.TYPE_INT32: pa.int32(),
    _T.TYPE_SINT32: pa.int32(),
    _T.TYPE_SFIXED32: pa.int32(),
    _T.TYPE_UINT32: pa.int64(),
    _T.TYPE_FIXED32: pa.int64(),
    _T.TYPE_INT64: pa.int64(),
    _T.TYPE_SINT64: pa.int64(),
    _T.TYPE_SFIXED64: pa.int64(),
    _T.TYPE_UINT64: pa.int64(),
    _T.TYPE_FIXED64: pa.int64(),
    _T.TYPE_BOOL: pa.bool_(),
    _T.TYPE_STRING: pa.string(),
    _T.TYPE_BYTES: pa.binary(),
}
Convert = Callable[[Any], Any]


def file_proto(text: str, where: str) -> descriptor_pb2.FileDescriptorProto:
    try:
        return descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError, DecodeError) as exc:
        raise SchemaError(
            f"{where}: not a base64 FileDescriptorProto (ask the registry with format=serialized): {exc}"
        ) from None


def _well_known(name: str) -> descriptor_pb2.FileDescriptorProto | None:
    stem = name.removeprefix("google/protobuf/").removesuffix(".proto")
    if not name.startswith("google/protobuf/") or stem not in _WELL_KNOWN:
        return None
    module = importlib.import_module(f"google.protobuf.{stem}_pb2")
    return descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)


def build_pool(
    source: SchemaSource, where: str
) -> tuple[descriptor_pool.DescriptorPool, descriptor_pb2.FileDescriptorProto]:
    """A fresh pool holding the schema's file, its references and the well-known imports."""
    refs = {name: file_proto(text, f"{where} reference {name}") for name, text in source.references}
    main = file_proto(source.text, where)
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(proto: descriptor_pb2.FileDescriptorProto, depth: int) -> None:
        if depth > 64:
            raise SchemaError(f"{where}: imports nest too deep")
        for dep in proto.dependency:
            if dep in added:
                continue
            found = refs.get(dep) or _well_known(dep)
            if found is None:
                raise SchemaError(f"{where}: the import {dep} is neither a reference nor well-known")
            add(found, depth + 1)
        added.add(proto.name)
        try:
            pool.Add(proto)
        except (TypeError, KeyError, ValueError) as exc:
            raise SchemaError(f"{where}: {exc}") from None

    add(main, 0)
    return pool, main


def message_name(proto: descriptor_pb2.FileDescriptorProto, indexes: tuple[int, ...]) -> str:
    """The full name of the message at this index path of the file (KeyError: none)."""
    messages = proto.message_type
    names = []
    for index in indexes:
        if not 0 <= index < len(messages):
            raise KeyError(f"no message at index path {list(indexes)} of {proto.name}")
        names.append(messages[index].name)
        messages = messages[index].nested_type
    return ".".join(([proto.package] if proto.package else []) + names)


def _repeated(field: FieldDescriptor) -> bool:
    # protobuf 7 dropped `label`; `is_repeated` arrived in 5.x (the extra allows >= 5)
    if hasattr(field, "is_repeated"):
        return bool(field.is_repeated)
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def value_form(field: FieldDescriptor, stack: tuple[str, ...]) -> tuple[pa.DataType, Convert | None]:
    """The Arrow type of one value of the field, and how to convert it (None: as it is)."""
    if field.type == _T.TYPE_MESSAGE:
        name = field.message_type.full_name
        if name == TIMESTAMP:
            return pa.timestamp("us", tz="UTC"), lambda t: t.seconds * 1_000_000 + t.nanos // 1000
        if name in WRAPPERS:
            return WRAPPERS[name], lambda w: w.value
        return message_form(field.message_type, stack)
    if field.type == _T.TYPE_ENUM:
        names = {v.number: v.name for v in field.enum_type.values}
        return pa.string(), lambda n: names.get(n, str(n))
    if field.type == _T.TYPE_GROUP or field.type not in SCALARS:
        raise SchemaError(f"the Protobuf field {field.full_name} (type {field.type}) has no Arrow form")
    return SCALARS[field.type], None


def field_form(field: FieldDescriptor, stack: tuple[str, ...]) -> tuple[pa.DataType, Convert]:
    """The field's Arrow type and how to read it from a message."""
    name = field.name
    entry = field.message_type if field.type == _T.TYPE_MESSAGE else None
    if _repeated(field) and entry is not None and entry.GetOptions().map_entry:
        key_type, _ = value_form(entry.fields_by_name["key"], stack)
        value_type, value = value_form(entry.fields_by_name["value"], stack)
        if value is None:
            return pa.map_(key_type, value_type), lambda m: dict(getattr(m, name))
        convert_value = value
        return pa.map_(key_type, value_type), lambda m: {
            k: convert_value(v) for k, v in getattr(m, name).items()
        }
    item_type, item = value_form(field, stack)
    if _repeated(field):
        if item is None:
            return pa.list_(item_type), lambda m: list(getattr(m, name))
        convert_item = item
        return pa.list_(item_type), lambda m: [convert_item(v) for v in getattr(m, name)]
    convert = item or (lambda v: v)
    if field.has_presence:
        return item_type, lambda m: convert(getattr(m, name)) if m.HasField(name) else None
    return item_type, lambda m: convert(getattr(m, name))


def message_form(message: Descriptor, stack: tuple[str, ...] = ()) -> tuple[pa.DataType, Convert]:
    if message.full_name in stack:
        raise SchemaError(f"the recursive Protobuf message {message.full_name} has no Arrow form")
    inner = (*stack, message.full_name)
    forms = [(f.name, *field_form(f, inner)) for f in message.fields]
    getters = [(name, get) for name, _, get in forms]

    def convert(msg: Message) -> dict[str, Any]:
        return {name: get(msg) for name, get in getters}

    return pa.struct([pa.field(name, t) for name, t, _ in forms]), convert


class ProtobufDecoder(RowDecoder):
    protobuf_framing = True

    def __init__(
        self, reader: SchemaSource, writers: Mapping[int, SchemaSource], message: str | None = None
    ) -> None:
        pool, main = build_pool(reader, "the reader schema")
        if not main.message_type:
            raise SchemaError("the reader schema defines no message")
        try:
            self.message = pool.FindMessageTypeByName(message or message_name(main, (0,)))
        except KeyError:
            raise SchemaError(f"the reader schema defines no message {message}") from None
        self.message_class = message_factory.GetMessageClass(self.message)
        self.arrow_type, self.convert = message_form(self.message)
        prepared: dict[int, object] = {}
        for schema_id, source in writers.items():
            if source.schema_type != PROTOBUF:
                prepared[schema_id] = f"schema id {schema_id} is a {source.schema_type} schema, not PROTOBUF"
                continue
            try:
                prepared[schema_id] = (file_proto(source.text, f"writer schema {schema_id}"), {})
            except SchemaError as exc:
                prepared[schema_id] = str(exc)
        super().__init__(prepared)

    def decode_body(self, writer: Any, body: bytes, indexes: tuple[int, ...] | None) -> Any:
        proto, names = writer
        key = indexes or (0,)
        name = names.get(key)
        if name is None:
            name = names[key] = message_name(proto, key)
        if name != self.message.full_name:
            raise ValueError(
                f"the record is a {name}; the reader schema's message is {self.message.full_name}"
            )
        return self.convert(self.message_class.FromString(body))
