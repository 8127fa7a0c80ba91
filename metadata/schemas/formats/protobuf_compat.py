"""Protobuf compatibility by the rules Confluent documents (its protobuf/diff package).

The old file's descriptor is diffed against the new one, message by message (by name) and
field by field (by number); the change is compatible when every difference is in `COMPATIBLE`.

| difference                         | when                                                         | compatible |
|------------------------------------|--------------------------------------------------------------|------------|
| PACKAGE_CHANGED                    | the package differs                                          | no         |
| MESSAGE_ADDED / MESSAGE_MOVED      | a message added, or its index among its siblings changed     | yes        |
| MESSAGE_REMOVED                    | a message (not a map entry) removed                          | no         |
| ENUM_* (added, removed, values)    | enums and their values added, removed, renamed               | yes        |
| FIELD_ADDED / FIELD_REMOVED        | a field number added or removed (not required ones)          | yes        |
| REQUIRED_FIELD_ADDED / _REMOVED    | a proto2 `required` field added or removed                   | no         |
| FIELD_NAME_CHANGED                 | the same number, another name                                | yes        |
| FIELD_KIND_CHANGED                 | scalar (enums count as scalars) vs message vs map            | no         |
| FIELD_SCALAR_KIND_CHANGED          | scalars of different wire groups: {int32, int64, uint32, uint64, bool, enums}, {sint32, sint64}, {string, bytes}, {fixed32, sfixed32}, {fixed64, sfixed64}, {float}, {double} | no |
| FIELD_NUMERIC_LABEL_CHANGED        | a numeric field's label changed (optional/required/repeated) | no         |
| FIELD_STRING_OR_BYTES_LABEL_CHANGED| a string/bytes field's label changed                         | yes        |
| FIELD_NAMED_TYPE_CHANGED           | a message field's type has another name, or is incompatible  | no         |
| ONEOF_ADDED / ONEOF_REMOVED        | a oneof added, or removed with all its fields                | yes        |
| ONEOF_FIELD_ADDED / _MOVED_TO_TOP_LEVEL | a oneof field added, or moved out of its oneof          | yes        |
| ONEOF_FIELD_REMOVED                | a field of a surviving oneof removed                         | no         |
| MULTIPLE_FIELDS_MOVED_TO_ONEOF / FIELD_MOVED_TO_EXISTING_ONEOF | fields that were independent now share a oneof | no |

Labels are compared as Confluent's .proto model has them: a proto3 field without a label
(and a oneof member) has none, so only explicit labels are compared. Map fields compare their
key and value types; message fields recurse into the message (once per pair: recursive
types stop). Messages are paths `#/Outer/Inner/3` (field number last). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from google.protobuf import descriptor_pb2
from skiff.metadata.schemas.formats.protobuf_format import ProtoParsed

F = descriptor_pb2.FieldDescriptorProto
COMPATIBLE = frozenset(
    {
        "MESSAGE_ADDED",
        "MESSAGE_MOVED",
        "ENUM_ADDED",
        "ENUM_REMOVED",
        "ENUM_CONST_ADDED",
        "ENUM_CONST_CHANGED",
        "ENUM_CONST_REMOVED",
        "FIELD_ADDED",
        "FIELD_REMOVED",
        "FIELD_NAME_CHANGED",
        "FIELD_STRING_OR_BYTES_LABEL_CHANGED",
        "ONEOF_ADDED",
        "ONEOF_REMOVED",
        "ONEOF_FIELD_ADDED",
        "ONEOF_FIELD_MOVED_TO_TOP_LEVEL",
    }
)
_SCALAR_KIND = {
    **dict.fromkeys(
        (F.TYPE_INT32, F.TYPE_INT64, F.TYPE_UINT32, F.TYPE_UINT64, F.TYPE_BOOL, F.TYPE_ENUM), "GENERAL_NUMBER"
    ),
    **dict.fromkeys((F.TYPE_SINT32, F.TYPE_SINT64), "SIGNED_NUMBER"),
    **dict.fromkeys((F.TYPE_STRING, F.TYPE_BYTES), "STRING_OR_BYTES"),
    **dict.fromkeys((F.TYPE_FIXED32, F.TYPE_SFIXED32), "FIXED32"),
    **dict.fromkeys((F.TYPE_FIXED64, F.TYPE_SFIXED64), "FIXED64"),
    F.TYPE_FLOAT: "FLOAT",
    F.TYPE_DOUBLE: "DOUBLE",
}
_DESCRIPTIONS = {
    "PACKAGE_CHANGED": "The package at '{p}' in the {r} schema does not match the package in the {w} schema",
    "MESSAGE_REMOVED": "The {r} schema is missing a MESSAGE type at path '{p}' in the {w} schema",
    "FIELD_KIND_CHANGED": "The type of a field at path '{p}' in the {r} schema does not match the {w} schema",
    "FIELD_SCALAR_KIND_CHANGED": "The kind of a SCALAR field at path '{p}' in the {r} schema does not match its kind in the {w} schema",
    "FIELD_NAMED_TYPE_CHANGED": "The type of a MESSAGE field at path '{p}' in the {r} schema does not match its type in the {w} schema",
    "FIELD_NUMERIC_LABEL_CHANGED": "The label for a NUMERIC field at path '{p}' in the {r} schema does not match its label in the {w} schema",
    "REQUIRED_FIELD_ADDED": "A required field  at path '{p}' in the {r} schema is missing in the {w} schema",
    "REQUIRED_FIELD_REMOVED": "The {r} schema is missing a required field at path: '{p}' in the {w} schema",
    "ONEOF_FIELD_REMOVED": "The {r} schema is missing a oneof field at path '{p}' in the {w} schema",
    "ONEOF_FIELD_MOVED_TO_TOP_LEVEL": "The oneof field at path '{p}' in the {r} schema was moved out of its oneof to a top-level field in the {w} schema",
    "MULTIPLE_FIELDS_MOVED_TO_ONEOF": "Multiple fields in the oneof at path '{p}' in the {r} schema are outside a oneof in the {w} schema",
    "FIELD_MOVED_TO_EXISTING_ONEOF": "A field in the oneof at path '{p}' in the {r} schema is outside an existing oneof in the {w} schema",
}


def describe(kind: str, path: str, reader_label: str, writer_label: str) -> str:
    """Confluent's one-line message for one Protobuf difference."""
    template = _DESCRIPTIONS.get(kind, "")
    description = template.replace("{r}", reader_label).replace("{w}", writer_label).replace("{p}", path)
    return f'{{errorType:"{kind}", description:"{description}"}}'


def check(reader: ProtoParsed, writer: ProtoParsed, reader_label: str, writer_label: str) -> list[str]:
    """Confluent's messages for `reader` reading data written with `writer`; [] if compatible."""
    ctx = _Ctx(_Types(writer), _Types(reader), [], set())
    if writer.file.package != reader.file.package:
        ctx.add("PACKAGE_CHANGED")
    _types(ctx, list(writer.file.message_type), list(reader.file.message_type))
    return [
        describe(kind, path, reader_label, writer_label) for kind, path in ctx.diffs if kind not in COMPATIBLE
    ]


class _Types:
    """Every message and enum a file can name, by full name (".pkg.Outer.Inner")."""

    def __init__(self, parsed: ProtoParsed) -> None:
        self.messages: dict[str, tuple[str, descriptor_pb2.DescriptorProto]] = {}  # name -> (package, type)
        self.syntax_of: dict[int, str] = {}  # id(message) -> its file's syntax
        for file in [*parsed.files.values(), parsed.file]:
            prefix = f".{file.package}" if file.package else ""
            self._collect(file, prefix, file.message_type)

    def _collect(self, file: descriptor_pb2.FileDescriptorProto, prefix: str, messages: Any) -> None:
        for message in messages:
            name = f"{prefix}.{message.name}"
            self.messages[name] = (file.package, message)
            self.syntax_of[id(message)] = file.syntax or "proto2"
            self._collect(file, name, message.nested_type)

    def map_entry(self, type_name: str) -> descriptor_pb2.DescriptorProto | None:
        found = self.messages.get(type_name)
        return found[1] if found and found[1].options.map_entry else None


@dataclass
class _Ctx:
    old: _Types
    new: _Types
    path: list[str]
    active: set[tuple[int, int]]
    diffs: list[tuple[str, str]] = field(default_factory=list)

    def add(self, kind: str, *extra: str) -> None:
        self.diffs.append((kind, "#/" + "/".join([*self.path, *extra])))

    def at(self, *extra: str) -> _Ctx:
        return _Ctx(self.old, self.new, [*self.path, *extra], self.active, self.diffs)

    def fresh(self, *path: str) -> _Ctx:
        return _Ctx(self.old, self.new, list(path), self.active)

    def compatible(self) -> bool:
        return all(kind in COMPATIBLE for kind, _ in self.diffs)


def _types(ctx: _Ctx, olds: list[Any], news: list[Any]) -> None:
    old_by_name = {m.name: (i, m) for i, m in enumerate(olds)}
    new_by_name = {m.name: (i, m) for i, m in enumerate(news)}
    for name in sorted(set(old_by_name) | set(new_by_name)):
        here = ctx.at(name)
        if name not in new_by_name:
            if not old_by_name[name][1].options.map_entry:
                here.add("MESSAGE_REMOVED")
        elif name not in old_by_name:
            if not new_by_name[name][1].options.map_entry:
                here.add("MESSAGE_ADDED")
        else:
            (old_index, old), (new_index, new) = old_by_name[name], new_by_name[name]
            _message(here, old, new)
            if old_index != new_index:
                here.add("MESSAGE_MOVED")


def _message(ctx: _Ctx, old: descriptor_pb2.DescriptorProto, new: descriptor_pb2.DescriptorProto) -> None:
    key = (id(old), id(new))
    if key not in ctx.active:
        ctx.active.add(key)
        _fields(ctx, old, new)
        ctx.active.discard(key)
    _types(ctx, list(old.nested_type), list(new.nested_type))


@dataclass
class _Fields:
    """A message's fields by number, and the (real) oneof of each number that is in one."""

    by_number: dict[int, descriptor_pb2.FieldDescriptorProto]
    oneof_of: dict[int, str]
    oneofs: dict[str, list[int]]
    proto3: bool


def _collect_fields(message: descriptor_pb2.DescriptorProto, proto3: bool) -> _Fields:
    found = _Fields({}, {}, {}, proto3)
    for item in message.field:
        found.by_number[item.number] = item
        # proto3 `optional` puts a field in a synthetic oneof: not a oneof in .proto terms
        if item.HasField("oneof_index") and not item.proto3_optional:
            name = message.oneof_decl[item.oneof_index].name
            found.oneof_of[item.number] = name
            found.oneofs.setdefault(name, []).append(item.number)
    return found


def _fields(ctx: _Ctx, old_message: Any, new_message: Any) -> None:
    old = _collect_fields(old_message, _proto3(ctx.old, old_message))
    new = _collect_fields(new_message, _proto3(ctx.new, new_message))
    deleted = {
        name
        for name, numbers in old.oneofs.items()
        if name not in new.oneofs and not any(n in new.by_number for n in numbers)
    }
    for name, numbers in new.oneofs.items():
        groups = {
            f"oneof:{old.oneof_of[n]}" if n in old.oneof_of else f"field:{n}"
            for n in numbers
            if n in old.by_number
        }
        moved_in = sum(1 for n in numbers if n in old.by_number and n not in old.oneof_of)
        if len(groups) > 1:
            ctx.add(
                "MULTIPLE_FIELDS_MOVED_TO_ONEOF" if moved_in > 1 else "FIELD_MOVED_TO_EXISTING_ONEOF", name
            )
    for name in sorted(set(old.oneofs) | set(new.oneofs)):
        if name not in new.oneofs:
            ctx.add("ONEOF_REMOVED", name)
        elif name not in old.oneofs:
            ctx.add("ONEOF_ADDED", name)
    for number in sorted(set(old.by_number) | set(new.by_number)):
        _field(ctx, number, old, new, deleted)


def _field(ctx: _Ctx, number: int, old: _Fields, new: _Fields, deleted: set[str]) -> None:
    tag = str(number)
    old_field, new_field = old.by_number.get(number), new.by_number.get(number)
    old_oneof, new_oneof = old.oneof_of.get(number), new.oneof_of.get(number)
    if new_field is None:
        if old_oneof is None:
            required = old.by_number[number].label == F.LABEL_REQUIRED
            ctx.add("REQUIRED_FIELD_REMOVED" if required else "FIELD_REMOVED", tag)
        elif old_oneof not in deleted:
            ctx.add("ONEOF_FIELD_REMOVED", old_oneof, tag)
    elif old_field is None:
        if new_oneof is not None:
            ctx.add("ONEOF_FIELD_ADDED", new_oneof, tag)
        else:
            ctx.add("REQUIRED_FIELD_ADDED" if new_field.label == F.LABEL_REQUIRED else "FIELD_ADDED", tag)
    else:
        if old_oneof is not None and new_oneof is None:
            ctx.add("ONEOF_FIELD_MOVED_TO_TOP_LEVEL", tag)
        here = ctx.at(new_oneof, tag) if new_oneof is not None else ctx.at(tag)
        if old_field.name != new_field.name:
            here.add("FIELD_NAME_CHANGED")
        _labels_and_types(
            here, _Typed(old_field, _label(old_field, old)), _Typed(new_field, _label(new_field, new))
        )


@dataclass(frozen=True)
class _Typed:
    """A field's type (scalar type or type name) and its label as the .proto text has it."""

    item: descriptor_pb2.FieldDescriptorProto
    label: int | None


def _label(item: descriptor_pb2.FieldDescriptorProto, fields: _Fields) -> int | None:
    if item.number in fields.oneof_of:
        return None
    if fields.proto3 and item.label == F.LABEL_OPTIONAL and not item.proto3_optional:
        return None  # a proto3 field without a label
    return int(item.label)


def _kind(types: _Types, item: descriptor_pb2.FieldDescriptorProto) -> str:
    if item.type == F.TYPE_MESSAGE and types.map_entry(item.type_name) is not None:
        return "MAP"
    if item.type in (F.TYPE_MESSAGE, F.TYPE_GROUP):
        return "MESSAGE"
    return "SCALAR"


def _labels_and_types(ctx: _Ctx, old: _Typed, new: _Typed) -> None:
    old_kind, new_kind = _kind(ctx.old, old.item), _kind(ctx.new, new.item)
    if old_kind != new_kind:
        ctx.add("FIELD_KIND_CHANGED")
    elif old_kind == "SCALAR":
        scalar = _SCALAR_KIND.get(old.item.type)
        if scalar != _SCALAR_KIND.get(new.item.type):
            ctx.add("FIELD_SCALAR_KIND_CHANGED")
        elif old.label is not None and new.label is not None and old.label != new.label:
            ctx.add(
                "FIELD_STRING_OR_BYTES_LABEL_CHANGED"
                if scalar == "STRING_OR_BYTES"
                else "FIELD_NUMERIC_LABEL_CHANGED"
            )
    elif old_kind == "MAP":
        old_entry, new_entry = ctx.old.map_entry(old.item.type_name), ctx.new.map_entry(new.item.type_name)
        assert old_entry is not None and new_entry is not None
        for index in (0, 1):  # the key, then the value
            _labels_and_types(ctx, _Typed(old_entry.field[index], None), _Typed(new_entry.field[index], None))
    else:
        _message_types(ctx, old.item.type_name, new.item.type_name)


def _message_types(ctx: _Ctx, old_name: str, new_name: str) -> None:
    old_found, new_found = ctx.old.messages.get(old_name), ctx.new.messages.get(new_name)
    if old_found is None or new_found is None:
        if old_name != new_name:
            ctx.add("FIELD_NAMED_TYPE_CHANGED")
        return
    old_local, new_local = _local(old_name, old_found[0]), _local(new_name, new_found[0])
    if old_local != new_local:
        ctx.add("FIELD_NAMED_TYPE_CHANGED")
        return
    sub = ctx.fresh(old_local)
    key = (id(old_found[1]), id(new_found[1]))
    if key in ctx.active:
        return
    ctx.active.add(key)
    _fields(sub, old_found[1], new_found[1])
    ctx.active.discard(key)
    ctx.diffs += sub.diffs
    if not sub.compatible():
        ctx.add("FIELD_NAMED_TYPE_CHANGED")


def _local(full_name: str, package: str) -> str:
    name = full_name.lstrip(".")
    return name[len(package) + 1 :] if package and name.startswith(package + ".") else name


def _proto3(types: _Types, message: Any) -> bool:
    return types.syntax_of.get(id(message), "proto2") == "proto3"
