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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

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


def record_heads(
    data: bytes, pos: int, count: int, is_key: bool, spans: list[tuple[int, int]] | None = None
) -> list[bytes | None]:
    """The first 5 bytes of each record's key (`is_key`) or value from `pos`, None where it is
    null (records the produce validator accepted: lengths consistent); with `spans`, each one's
    (start, end) is appended to it too. Varints are read inline in their one-byte form (the
    hot path: this walk is most of validation's cost); headers are skipped whole."""
    heads: list[bytes | None] = []
    append = heads.append
    uvarint = read_uvarint
    for _ in range(count):
        v = data[pos]  # the record's length
        if v < 0x80:
            pos += 1
        else:
            v, pos = uvarint(data, pos, 5)
        end = pos + (v >> 1)
        p = pos + 1  # after attributes: the timestamp delta and the offset delta
        if data[p] < 0x80 and data[p + 1] < 0x80:
            p += 2
        else:
            p = uvarint(data, uvarint(data, p, 10)[1], 5)[1]
        v = data[p]  # key length (zigzag: 1 is -1, null)
        if v < 0x80:
            p += 1
        else:
            v, p = uvarint(data, p, 5)
        if not is_key:
            if v != 1:
                p += v >> 1
            v = data[p]  # value length
            if v < 0x80:
                p += 1
            else:
                v, p = uvarint(data, p, 5)
        if v == 1:
            append(None)
        else:
            n = v >> 1
            append(data[p : p + (n if n < HEADER_BYTES else HEADER_BYTES)])
        if spans is not None:
            spans.append((p, p + (v >> 1)))
        pos = end
    return heads


def value_heads(data: bytes, pos: int, count: int) -> list[bytes | None]:
    """`record_heads` of values, faster: the two-byte varint forms read inline (lengths of 64
    to 8191 bytes), and the offset delta's size known without reading it (record i's is i:
    the produce validator refused any other)."""
    heads: list[bytes | None] = []
    append = heads.append
    uvarint = read_uvarint
    for i in range(count):
        v = data[pos]  # the record's length
        if v < 0x80:
            pos += 1
        elif data[pos + 1] < 0x80:
            v = (v & 0x7F) | (data[pos + 1] << 7)
            pos += 2
        else:
            v, pos = uvarint(data, pos, 5)
        end = pos + (v >> 1)
        # after attributes: a one-byte timestamp delta (the common case) and offset delta i
        if data[pos + 1] < 0x80:
            p = pos + 2 + (1 if i < 64 else 2 if i < 8192 else 3 if i < 1048576 else 4)
        else:
            p = uvarint(data, uvarint(data, pos + 1, 10)[1], 5)[1]
        v = data[p]  # key length (zigzag: 1 is -1, null)
        if v < 0x80:
            p += 1 + (v >> 1 if v != 1 else 0)
        else:
            v, p = uvarint(data, p, 5)
            p += v >> 1
        v = data[p]  # value length
        if v < 0x80:
            p += 1
        elif data[p + 1] < 0x80:
            v = (v & 0x7F) | (data[p + 1] << 7)
            p += 2
        else:
            v, p = uvarint(data, p, 5)
        append(None if v == 1 else data[p : p + (v >> 1 if v < 10 else HEADER_BYTES)])
        pos = end
    return heads


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


_MISSING: Any = object()
_BY_MESSAGE: Any = object()  # a Protobuf schema under a record-name strategy: the message decides


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
    errors: list[tuple[int, str]] = []
    subjects: set[str] = set()
    ids: set[int] = set()
    for is_key, strategy in ((True, rules.key_strategy), (False, rules.value_strategy)):
        if strategy is not None:
            decide = _Decider(topic, is_key, strategy, registered, names)
            for i, outcome in decide.outcomes(data, pos, count):
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


Outcome = None | str | int | tuple[str]
"""One record side's: passes (None), refused (why), or waits for a fetch of a schema id's names
(the id) or of a subject's ids (a 1-tuple)."""


class _Decider:
    """One side's outcome per record header (memoized by the caller) and per Protobuf message."""

    def __init__(
        self, topic: str, is_key: bool, strategy: str, registered: Registered, names: NamesById
    ) -> None:
        self.topic = topic
        self.side = "key" if is_key else "value"
        self.is_key = is_key
        self.strategy = strategy
        self.registered = registered
        self.names = names
        self.by_topic = strategy == TOPIC_NAME_STRATEGY
        self.memo: dict[bytes, Any] = {}  # by header: records of a batch share a few schema ids
        self.by_index: dict[tuple[int, tuple[int, ...]], Outcome] = {}

    def outcomes(self, data: bytes, pos: int, count: int) -> Iterator[tuple[int, str | int | tuple[str]]]:
        """(batch index, outcome) of each record that does not simply pass."""
        memo = self.memo
        spans: list[tuple[int, int]] | None = None  # where each record's key/value is: Protobuf only
        heads = record_heads(data, pos, count, True) if self.is_key else value_heads(data, pos, count)
        for i, head in enumerate(heads):
            if head is None:
                continue  # null: passes, as in Confluent Server
            outcome = memo.get(head, _MISSING)
            if outcome is _MISSING:
                outcome = memo[head] = self.by_header(head)
            if outcome is _BY_MESSAGE:
                if spans is None:  # walked again, once, for the message indexes
                    spans = []
                    record_heads(data, pos, count, self.is_key, spans)
                outcome = self.by_message(head, data, *spans[i])
            if outcome is not None:
                yield i, outcome

    def by_header(self, head: bytes) -> Any:
        """An `Outcome` from the 5-byte header alone, or _BY_MESSAGE."""
        if len(head) < HEADER_BYTES:
            return f"{self.side} of {len(head)} bytes has no schema id (the wire format starts with 5 bytes)"
        if head[0] != MAGIC_BYTE:
            return f"{self.side} has no schema id: it starts with byte {head[0]}, not the magic byte 0"
        schema_id = int.from_bytes(head[1:])
        if self.by_topic:
            return self._decide(schema_id, None)
        names = self.names(schema_id)
        if names is None:
            return schema_id
        if names.schema_type == "PROTOBUF" and names.error is None:
            return _BY_MESSAGE
        return self._decide(schema_id, names)

    def by_message(self, head: bytes, data: bytes, start: int, end: int) -> Outcome:
        """The `Outcome` of a Protobuf record: its message indexes name the record."""
        schema_id = int.from_bytes(head[1:])
        try:
            indexes = message_indexes(data, start + HEADER_BYTES, end)
        except ValueError as e:
            return f"{self.side} with schema id {schema_id} has malformed Protobuf message indexes ({e})"
        key = (schema_id, indexes)
        outcome = self.by_index.get(key, _MISSING)
        if outcome is _MISSING:
            outcome = self.by_index[key] = self._decide(schema_id, self.names(schema_id), indexes)
        return cast(Outcome, outcome)

    def _decide(self, schema_id: int, names: SchemaNames | None, indexes: tuple[int, ...] = ()) -> Outcome:
        record_name = None
        if names is not None:
            try:
                record_name = names.record_name(indexes)
            except ValueError as e:
                return f"{self.side} schema id {schema_id}: {e}"
        subject = subject_name(self.strategy, self.topic, self.is_key, record_name)
        known = self.registered(subject, schema_id)
        if known is None:
            return (subject,)
        if not known:
            return f"{self.side} schema id {schema_id} is not registered under subject {subject!r}"
        return None
