"""Broker-side schema validation: Confluent Server's schema id check on produced records.

A topic with `confluent.value.schema.validation=true` (`confluent.key.schema.validation` for
keys) admits a record only if its value (key) is in Confluent's wire format and names a schema
registered under the topic's subject:

    byte 0      magic byte 0
    bytes 1-4   the schema id, big-endian int32 (a global id of the registry)
    (PROTOBUF)  the message indexes: a zigzag varint count, then that many zigzag varints (the
                path to the message in the schema's file); a single 0 byte means [0]
    rest        the payload, never read here

The subject comes from the topic's `confluent.{value,key}.subject.name.strategy`:
TopicNameStrategy `<topic>-value` (`<topic>-key`), RecordNameStrategy `<record name>`,
TopicRecordNameStrategy `<topic>-<record name>`, where the record name is read from the
schema with the record's id (`SchemaNames`): an Avro schema's full name, a Protobuf message's
full name (found by the message indexes), a JSON Schema's `title`, as Confluent's serializers
name them. Records with a null value (key) pass, as in Confluent Server (tombstones on any
topic: its documented design choice for compacted topics).

`check_batch` is pure and synchronous: it walks one batch's records (decompressing a
compressed batch, within the same cap as the produce validator), parses each header once
(records sharing a schema id cost a dict lookup), and answers from the cache
(`agent.schema_cache.SchemaIdCache`): None (every record passes), a `Refusal` (INVALID_RECORD
with Kafka's per-record errors, KIP-467), or the `Lookups` the cache needs first (ids it has
not seen, subjects it holds no fresh list of). The produce handler fetches those and checks
again; the cache rate-limits what an unknown id may cost the registry.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from skiff.fileformat import codecs
from skiff.fileformat.batch_header import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    Compression,
)
from skiff.fileformat.varint import read_uvarint
from skiff.metadata.configs import (
    KEY_SCHEMA_VALIDATION,
    KEY_SUBJECT_NAME_STRATEGY,
    RECORD_NAME_STRATEGY,
    TOPIC_NAME_STRATEGY,
    VALUE_SCHEMA_VALIDATION,
    VALUE_SUBJECT_NAME_STRATEGY,
    config_value,
)
from skiff.metadata.types import Topic

MAGIC_BYTE = 0
HEADER_BYTES = 5  # magic byte + int32 schema id
MAX_MESSAGE_INDEXES = 64  # deeper nesting than any real schema; bounds the parse
_RECORDS_COUNT = struct.Struct(">i")
_RECORDS_COUNT_OFFSET = 57
_SHOWN_RECORD_ERRORS = 3  # Kafka's message lists at most the first three

RecordErrors = tuple[tuple[int, str], ...]


@dataclass(frozen=True)
class SchemaRules:
    """A topic's validation: the strategy of each validated side (None: not validated)."""

    key_strategy: str | None
    value_strategy: str | None


def rules_from_configs(configs: Mapping[str, str]) -> SchemaRules | None:
    """The validation a topic's configs ask for; None when neither side is validated."""
    key = config_value(configs, KEY_SCHEMA_VALIDATION) == "true"
    value = config_value(configs, VALUE_SCHEMA_VALIDATION) == "true"
    if not key and not value:
        return None
    return SchemaRules(
        config_value(configs, KEY_SUBJECT_NAME_STRATEGY) if key else None,
        config_value(configs, VALUE_SUBJECT_NAME_STRATEGY) if value else None,
    )


# Parsed rules by topic object, as agent.handlers.produce caches its other rules: Topic values
# are immutable and the topic cache hands out one object until it reloads it (the identity
# check guards against a reused id()); cleared when it grows past the bound.
_RULES_CACHE_MAX = 1024
_rules_cache: dict[int, tuple[Topic, SchemaRules | None]] = {}


def topic_rules(topic: Topic) -> SchemaRules | None:
    """`rules_from_configs` for a topic, parsed once per topic object (the produce hot path)."""
    cached = _rules_cache.get(id(topic))
    if cached is not None and cached[0] is topic:
        return cached[1]
    if len(_rules_cache) >= _RULES_CACHE_MAX:
        _rules_cache.clear()
    rules = rules_from_configs(topic.configs)
    _rules_cache[id(topic)] = (topic, rules)
    return rules


# --- the record walk --------------------------------------------------------------------

Span = tuple[int, int]  # (position, length) of a key or value in the records; length -1: null


def _uvarint(data: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    return read_uvarint(data, pos, max_bytes)


def record_spans(data: bytes, pos: int, count: int) -> tuple[list[Span], list[Span]]:
    """The key and value spans of `count` records from `pos` (records the produce validator
    accepted: lengths consistent). Only the lengths are read; headers are skipped whole."""
    keys: list[Span] = []
    values: list[Span] = []
    for _ in range(count):
        length, pos = _uvarint(data, pos, 5)
        end = pos + (length >> 1)
        _, p = _uvarint(data, pos + 1, 10)  # after attributes: the timestamp delta
        _, p = _uvarint(data, p, 5)  # offset delta
        n, p = _uvarint(data, p, 5)
        if n == 1:  # zigzag -1: null
            keys.append((p, -1))
        else:
            keys.append((p, n >> 1))
            p += n >> 1
        n, p = _uvarint(data, p, 5)
        values.append((p, -1) if n == 1 else (p, n >> 1))
        pos = end
    return keys, values


def batch_records(
    batch: bytes, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> tuple[bytes, int, int]:
    """(records bytes, their first position, record count) of one validated batch."""
    count = _RECORDS_COUNT.unpack_from(batch, _RECORDS_COUNT_OFFSET)[0]
    codec = struct.unpack_from(">h", batch, ATTRIBUTES_OFFSET)[0] & COMPRESSION_MASK
    if codec == Compression.NONE:
        return batch, BATCH_HEADER_SIZE, count
    data = codecs.decompress(codec, memoryview(batch)[BATCH_HEADER_SIZE:], max_output=max_decompressed_bytes)
    return data, 0, count


def message_indexes(data: bytes, pos: int, end: int) -> tuple[int, ...]:
    """The Protobuf message indexes at `pos` (see module doc); ValueError when malformed."""
    try:
        z, pos = read_uvarint(data, pos, 5, end)
        count = (z >> 1) ^ -(z & 1)
        if count == 0:
            return (0,)
        if not 0 < count <= MAX_MESSAGE_INDEXES:
            raise ValueError(f"message index count {count}")
        out = []
        for _ in range(count):
            z, pos = read_uvarint(data, pos, 5, end)
            out.append((z >> 1) ^ -(z & 1))
    except IndexError:  # TruncatedVarintError is one
        raise ValueError("truncated message indexes") from None
    return tuple(out)


# --- record names and subjects ----------------------------------------------------------


@dataclass(frozen=True)
class SchemaNames:
    """What the record-name strategies need of one schema id: its type and record name(s)."""

    schema_type: str
    name: str | None = None  # AVRO and JSON: the record name (None: the schema has none)
    proto_file: Any = None  # PROTOBUF: its FileDescriptorProto (names by message indexes)
    error: str | None = None  # why no name can be read (the stored schema does not parse here)

    def record_name(self, indexes: tuple[int, ...]) -> str:
        """The record name for a record with these message indexes; ValueError why not."""
        if self.error is not None:
            raise ValueError(self.error)
        if self.schema_type != "PROTOBUF":
            if self.name is None:
                what = "title" if self.schema_type == "JSON" else "name"
                raise ValueError(f"its {self.schema_type} schema has no {what} to name the subject by")
            return self.name
        names: list[str] = [self.proto_file.package] if self.proto_file.package else []
        messages = self.proto_file.message_type
        for i in indexes:
            if not 0 <= i < len(messages):
                raise ValueError(f"message indexes {list(indexes)} name no message of its Protobuf schema")
            names.append(messages[i].name)
            messages = messages[i].nested_type
        return ".".join(names)


def names_of(schema_type: str, parsed: Any) -> SchemaNames:
    """`SchemaNames` from a schema parsed by `metadata.schemas.formats.parse_schema` (`.parsed`):
    an Avro schema's full name (a primitive's type name), a JSON Schema's title."""
    if schema_type == "AVRO":
        schema = parsed.schema  # an avro.schema.Schema
        return SchemaNames("AVRO", name=getattr(schema, "fullname", None) or str(schema.type))
    if schema_type == "JSON":
        document = parsed.document
        title = document.get("title") if isinstance(document, dict) else None
        return SchemaNames("JSON", name=title if isinstance(title, str) else None)
    return SchemaNames("PROTOBUF", proto_file=parsed.file)


def subject_name(strategy: str, topic: str, is_key: bool, record_name: str | None) -> str:
    """The subject a strategy names (Confluent's TopicNameStrategy, RecordNameStrategy,
    TopicRecordNameStrategy); `record_name` is needed by the last two."""
    if strategy == TOPIC_NAME_STRATEGY:
        return f"{topic}-{'key' if is_key else 'value'}"
    assert record_name is not None
    if strategy == RECORD_NAME_STRATEGY:
        return record_name
    return f"{topic}-{record_name}"


# --- the check --------------------------------------------------------------------------


class Lookups(NamedTuple):
    """What the cache must fetch before a batch can be decided."""

    subjects: frozenset[str]
    schema_ids: frozenset[int]


class Refusal(NamedTuple):
    """A batch refused: Kafka's message and the rejected records (INVALID_RECORD)."""

    message: str
    record_errors: RecordErrors


Verdict = None | Refusal | Lookups

# What a cache answers (agent.schema_cache.SchemaIdCache): whether `schema_id` is registered
# under `subject` (None: unknown until fetched); the names of a schema id (None: fetch it; a
# `SchemaNames` whose error says it is not in the registry).
Registered = Callable[[str, int], bool | None]
NamesById = Callable[[int], SchemaNames | None]


def records_rejected(errors: RecordErrors) -> str:
    """Kafka's INVALID_RECORD message for record errors (LogValidator.processRecordErrors)."""
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:_SHOWN_RECORD_ERRORS])
    return (
        f"One or more records have been rejected due to {len(errors)} record errors in total, and only"
        f" showing the first three errors at most: [{shown}]"
    )


def check_batch(
    topic: str,
    rules: SchemaRules,
    batch: bytes,
    registered: Registered,
    names: NamesById,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> Verdict:
    """Decide one validated batch (see module doc)."""
    data, pos, count = batch_records(batch, max_decompressed_bytes)
    keys, values = record_spans(data, pos, count)
    errors: list[tuple[int, str]] = []
    subjects: set[str] = set()
    ids: set[int] = set()
    for side, strategy, spans in (("key", rules.key_strategy, keys), ("value", rules.value_strategy, values)):
        if strategy is None:
            continue
        decide = _Decider(topic, side, strategy, data, registered, names)
        for i, (p, n) in enumerate(spans):
            if n < 0:
                continue  # null: passes, as in Confluent Server
            outcome = decide(p, n)
            if outcome is None:
                continue
            if isinstance(outcome, str):
                errors.append((i, outcome))
            elif isinstance(outcome, int):
                ids.add(outcome)
            else:
                subjects.add(outcome[0])
    if subjects or ids:
        return Lookups(frozenset(subjects), frozenset(ids))
    if errors:
        errors.sort()
        found = tuple(errors)
        return Refusal(records_rejected(found), found)
    return None


class _Decider:
    """One side's outcome per record header, memoized per header (records of a batch share a
    few ids): None (passes), a str (why it is refused), an int (fetch this schema id's names)
    or a 1-tuple (fetch this subject's ids)."""

    def __init__(
        self, topic: str, side: str, strategy: str, data: bytes, registered: Registered, names: NamesById
    ) -> None:
        self.topic = topic
        self.side = side
        self.is_key = side == "key"
        self.strategy = strategy
        self.data = data
        self.registered = registered
        self.names = names
        self.by_topic = strategy == TOPIC_NAME_STRATEGY
        self.memo: dict[Any, None | str | int | tuple[str]] = {}

    def __call__(self, p: int, n: int) -> None | str | int | tuple[str]:
        data = self.data
        if n < HEADER_BYTES or data[p] != MAGIC_BYTE:
            return self._no_header(p, n)
        schema_id = int.from_bytes(data[p + 1 : p + HEADER_BYTES])
        key: Any = schema_id
        names: SchemaNames | None = None
        if not self.by_topic:
            names = self.names(schema_id)
            if names is None:
                return schema_id
            if names.schema_type == "PROTOBUF" and names.error is None:
                try:
                    key = (schema_id, message_indexes(data, p + HEADER_BYTES, p + n))
                except ValueError as e:
                    return (
                        f"{self.side} with schema id {schema_id} has malformed Protobuf message indexes ({e})"
                    )
        if key in self.memo:
            return self.memo[key]
        outcome = self.memo[key] = self._decide(schema_id, key, names)
        return outcome

    def _no_header(self, p: int, n: int) -> str:
        if n < HEADER_BYTES:
            return f"{self.side} of {n} bytes has no schema id (the wire format starts with 5 bytes)"
        return f"{self.side} has no schema id: it starts with byte {self.data[p]}, not the magic byte 0"

    def _decide(self, schema_id: int, key: Any, names: SchemaNames | None) -> None | str | tuple[str]:
        record_name = None
        if names is not None:
            if names.error is not None:
                return f"{self.side} schema id {schema_id}: {names.error}"
            try:
                record_name = names.record_name(key[1] if isinstance(key, tuple) else ())
            except ValueError as e:
                return f"{self.side} schema id {schema_id}: {e}"
        subject = subject_name(self.strategy, self.topic, self.is_key, record_name)
        known = self.registered(subject, schema_id)
        if known is None:
            return (subject,)
        if not known:
            return f"{self.side} schema id {schema_id} is not registered under subject {subject!r}"
        return None
