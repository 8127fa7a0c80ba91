"""Protobuf schemas: a serialized FileDescriptorProto (base64) or .proto source text.

The two forms Confluent accepts:
- base64 of a serialized `FileDescriptorProto`, what confluent-kafka's Python
  `ProtobufSerializer` registers (`_schema_to_str`), with each import sent as a reference named
  by its import path, and the well-known imports (google/protobuf/*, google/type/*,
  confluent/*) not sent at all;
- .proto source, what the Java client, the Confluent CLI and people send. It is compiled by
  protoc itself, in process, through grpcio-tools (`_protoc_compiler.get_protos`: protoc's own
  parser and checks, errors raised as one exception with file:line:column, about 1 ms a file).
  protoc reads files, so the schema and its .proto references are written to a private
  temporary directory for the compile, and the descriptor is read back from the generated
  module's `AddSerializedFile(b'...')` literal.

Either way the result is a `FileDescriptorProto` that is then built into a fresh
`DescriptorPool` with its references and the well-known files, which checks every type name
resolves. Limitation: .proto source can import .proto-source references and the well-known
google/protobuf and google/type files, but not a reference registered as a base64 descriptor
nor confluent/*.proto (protoc needs their source); such a schema is refused with a message.

Text forms: as given (the text, stripped); normalized: the base64 of the descriptor without
source info, serialized deterministically; serialized (`format=serialized`): the base64
descriptor of either form. The file's name is the reference name for references and
"schema.proto" for a schema given as source.
"""

from __future__ import annotations

import ast
import base64
import binascii
import importlib
import os
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message import DecodeError
from skiff.metadata.schemas.formats.model import InvalidSchema, ParsedSchema

MAIN_FILE = "schema.proto"
# Well-known files the serializers never send as references: loaded from the modules that
# ship them, when installed (google/type: googleapis-common-protos; confluent: confluent-kafka).
_WELL_KNOWN_MODULES = (
    *(
        f"google.protobuf.{n}_pb2"
        for n in (
            "any",
            "source_context",
            "type",
            "api",
            "descriptor",
            "duration",
            "empty",
            "field_mask",
            "struct",
            "timestamp",
            "wrappers",
        )
    ),
    *(
        f"google.type.{n}_pb2"
        for n in (
            "calendar_period",
            "color",
            "date",
            "datetime",
            "dayofweek",
            "expr",
            "fraction",
            "latlng",
            "money",
            "month",
            "postal_address",
            "quaternion",
            "timeofday",
        )
    ),
    "confluent_kafka.schema_registry.confluent.meta_pb2",
    "confluent_kafka.schema_registry.confluent.type.decimal_pb2",
)


@dataclass(frozen=True)
class ProtoParsed:
    """The schema's file descriptor and every file it can name types from (by file name)."""

    file: descriptor_pb2.FileDescriptorProto
    files: Mapping[str, descriptor_pb2.FileDescriptorProto]


def parse(text: str, references: Mapping[str, str], normalize: bool) -> ParsedSchema:
    files = dict(well_known_files())
    sources: dict[str, str] = {}
    for name, ref_text in references.items():
        _check_path(name)
        if name in files:
            continue  # a well-known file sent anyway (skip_known_types=False): ours stands
        files[name] = _to_file(name, ref_text, sources, f"reference {name!r}: ")
        if not _is_base64(ref_text):
            sources[name] = ref_text
    file = _to_file(MAIN_FILE, text, sources, "")
    _build(file, files)
    canonical = text.strip()
    if normalize:
        canonical = _normalized(file)
    return ParsedSchema("PROTOBUF", canonical, ProtoParsed(file, files))


def serialized(parsed: ProtoParsed) -> str:
    """The base64 of the serialized FileDescriptorProto (Confluent's format=serialized)."""
    return base64.standard_b64encode(parsed.file.SerializeToString()).decode("ascii")


def _normalized(file: descriptor_pb2.FileDescriptorProto) -> str:
    copy = descriptor_pb2.FileDescriptorProto()
    copy.CopyFrom(file)
    copy.ClearField("source_code_info")
    return base64.standard_b64encode(copy.SerializeToString(deterministic=True)).decode("ascii")


def _to_file(
    name: str, text: str, sources: Mapping[str, str], where: str
) -> descriptor_pb2.FileDescriptorProto:
    if _is_base64(text):
        file = descriptor_pb2.FileDescriptorProto()
        try:
            file.ParseFromString(base64.b64decode("".join(text.split()), validate=True))
        except (DecodeError, binascii.Error, ValueError) as e:
            raise InvalidSchema(
                f"Invalid Protobuf schema: {where}not a serialized FileDescriptorProto ({e})"
            ) from e
        if not file.name or name != MAIN_FILE:
            file.name = name
        return file
    return _compile(name, text, sources, where)


def _is_base64(text: str) -> bool:
    """Base64 text has no spaces, braces or semicolons, which .proto source always has."""
    stripped = text.strip()
    return bool(stripped) and not any(c in stripped for c in ' ;{}"')


def _compile(
    name: str, text: str, sources: Mapping[str, str], where: str
) -> descriptor_pb2.FileDescriptorProto:
    from grpc_tools import _protoc_compiler  # heavy (protoc): only when source text comes

    with tempfile.TemporaryDirectory(prefix="skiff-proto-") as root:
        for path, source in {**sources, name: text}.items():
            target = os.path.join(root, *PurePosixPath(path).parts)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w", encoding="utf-8") as out:
                out.write(source)
        include = [root.encode(), *(p.encode() for p in _include_paths())]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # protoc's warnings (unused imports) are not errors
                generated = _protoc_compiler.get_protos(name.encode(), include)
        except _protoc_compiler.ProtocErrors as e:  # "file:line:col error: ..." per error
            errors = "; ".join(str(e).replace(root + os.sep, "").splitlines())
            raise InvalidSchema(f"Invalid Protobuf schema: {where}{errors}") from e
    return _descriptor_from_module(generated[-1][1], where)


def _descriptor_from_module(code: bytes, where: str) -> descriptor_pb2.FileDescriptorProto:
    for node in ast.walk(ast.parse(code)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, bytes)
        ):
            return descriptor_pb2.FileDescriptorProto.FromString(node.args[0].value)
    raise InvalidSchema(f"Invalid Protobuf schema: {where}protoc gave no descriptor")


def _include_paths() -> list[str]:
    import grpc_tools

    paths = [os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")]
    try:
        import google.type.date_pb2 as date_pb2  # google/type/*.proto ship beside their modules

        paths.append(os.path.dirname(os.path.dirname(os.path.dirname(date_pb2.__file__))))
    except ImportError:
        pass
    return paths


def _build(
    file: descriptor_pb2.FileDescriptorProto, files: Mapping[str, descriptor_pb2.FileDescriptorProto]
) -> None:
    """Build `file` into a fresh pool with what it imports: every type name must resolve."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(entry: descriptor_pb2.FileDescriptorProto, depth: int) -> None:
        if entry.name in added or depth > 100:
            return
        for dependency in entry.dependency:
            if dependency not in files:
                raise InvalidSchema(
                    f"Invalid Protobuf schema: import {dependency!r} of {entry.name!r} is neither a "
                    "reference nor a well-known file"
                )
            add(files[dependency], depth + 1)
        added.add(entry.name)
        try:
            pool.Add(entry)
        except (TypeError, ValueError) as e:
            raise InvalidSchema(f"Invalid Protobuf schema: {entry.name}: {e}") from e

    add(file, 0)


def _check_path(name: str) -> None:
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\\" in name or "\0" in name:
        raise InvalidSchema(f"Invalid Protobuf schema: reference name {name!r} is not a relative import path")


_WELL_KNOWN: dict[str, descriptor_pb2.FileDescriptorProto] = {}


def well_known_files() -> Mapping[str, descriptor_pb2.FileDescriptorProto]:
    """The well-known files that are installed, by file name (loaded once)."""
    if not _WELL_KNOWN:
        for module_name in _WELL_KNOWN_MODULES:
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
            file = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
            _WELL_KNOWN[file.name] = file
    return _WELL_KNOWN
