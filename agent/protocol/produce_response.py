"""A direct encoder for Produce responses (v3-v9), the agent's most frequent response.

kio's generic writer walks each entity's dataclass fields and checks every integer's
phantom type: ~12.6 us for a one-partition ProduceResponse, the largest single cost of a
small produce request once the batch is validated. The handler builds a v9
`ProduceResponse`; this writes it at the requested version with `struct`, ~2 us. It
must produce exactly kio's bytes (tests/unit/test_produce_response.py compares the two
for every version, with errors, messages, record errors and LogAppendTime).

Layout (Kafka's ProduceResponse.json): responses [name, partition_responses [index i32,
error_code i16, base_offset i64, log_append_time_ms i64, log_start_offset i64 (v5+),
record_errors [batch_index i32, batch_index_error_message nullable string] (v8+),
error_message nullable string (v8+)]], throttle_time_ms i32. v9 is flexible: compact
arrays and strings (unsigned varint length + 1), an empty tagged-field section after
each struct, and response header v1 (one more empty tagged-field section). Fields that
a version lacks are dropped, as `convert` does. Tagged fields are never written (none
exist up to v9).
"""

from __future__ import annotations

import struct
from typing import Any

from skiff.fileformat.varint import write_uvarint

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
# index, error_code, base_offset, log_append_time_ms
_PARTITION_HEAD = struct.Struct(">ihqq")
_I64 = struct.Struct(">q")
_FRAME_HEAD = struct.Struct(">ii")  # size, correlation id

MIN_VERSION = 3
MAX_VERSION = 9


def _string(out: bytearray, value: str | None, flexible: bool, nullable: bool) -> None:
    if value is None:
        if not nullable:
            raise ValueError("null in a non-nullable string")
        if flexible:
            out.append(0)
        else:
            out += _I16.pack(-1)
        return
    raw = value.encode("utf-8")
    if flexible:
        write_uvarint(out, len(raw) + 1)
    else:
        out += _I16.pack(len(raw))
    out += raw


def _array_length(out: bytearray, n: int, flexible: bool) -> None:
    if flexible:
        write_uvarint(out, n + 1)
    else:
        out += _I32.pack(n)


def _ms(value: Any) -> int:
    """A kio timestamp (aware datetime) as epoch ms, -1 for None (kio: round(ts * 1000))."""
    return -1 if value is None else round(value.timestamp() * 1000)


# One partition's answer, as `encode_produce_answers` takes it: (index, error code,
# base_offset, log_append_time_ms, log_start_offset, error_message, record_errors), the
# record errors being (batch index, message) pairs.
PartitionAnswer = tuple[int, int, int, int, int, "str | None", "tuple[tuple[int, str | None], ...]"]


def encode_produce_response(correlation_id: int, version: int, response: Any) -> bytearray:
    """The complete frame (size prefix, header, body) of a v9 `ProduceResponse` at `version`."""
    return encode_produce_answers(
        correlation_id,
        version,
        [
            (
                topic.name,
                [
                    (
                        p.index,
                        p.error_code.value,
                        p.base_offset,
                        _ms(p.log_append_time),
                        p.log_start_offset,
                        p.error_message,
                        tuple((e.batch_index, e.batch_index_error_message) for e in p.record_errors),
                    )
                    for p in topic.partition_responses
                ],
            )
            for topic in response.responses
        ],
        round(response.throttle_time.total_seconds() * 1000),
    )


# The usual answer, one partition of one topic without an error message or record errors:
# the frame is a cached prefix (header to the partition count) and one struct per version.
_ONE_TAIL = {
    3: struct.Struct(">ihqqi"),  # index, code, base_offset, append_ms, throttle
    5: struct.Struct(">ihqqqi"),  # + log_start_offset
    8: struct.Struct(">ihqqqihi"),  # + record_errors [] (i32 0), error_message null (i16 -1)
    9: struct.Struct(">ihqqqBBBBiB"),  # compact: [] 1, null 0, tags 0 0, throttle, tags 0
}
_ONE_PREFIXES: dict[tuple[int, str], bytes] = {}
_ONE_PREFIXES_MAX = 4096  # topic names x versions; cleared when full (a cache, not a registry)


def _one_prefix(version: int, name: str) -> bytes:
    prefix = _ONE_PREFIXES.get((version, name))
    if prefix is None:
        flexible = version >= 9
        out = bytearray(b"\x00" if flexible else b"")  # response header v1: no tagged fields
        _array_length(out, 1, flexible)
        _string(out, name, flexible, nullable=False)
        _array_length(out, 1, flexible)
        if len(_ONE_PREFIXES) >= _ONE_PREFIXES_MAX:
            _ONE_PREFIXES.clear()
        prefix = _ONE_PREFIXES[(version, name)] = bytes(out)
    return prefix


def _encode_one(
    correlation_id: int, version: int, name: str, answer: PartitionAnswer, throttle_ms: int
) -> bytearray:
    index, code, base_offset, append_ms, start_offset = answer[:5]
    prefix = _one_prefix(version, name)
    if version >= 9:
        tail = _ONE_TAIL[9].pack(
            index, code, base_offset, append_ms, start_offset, 1, 0, 0, 0, throttle_ms, 0
        )
    elif version == 8:
        tail = _ONE_TAIL[8].pack(index, code, base_offset, append_ms, start_offset, 0, -1, throttle_ms)
    elif version >= 5:
        tail = _ONE_TAIL[5].pack(index, code, base_offset, append_ms, start_offset, throttle_ms)
    else:
        tail = _ONE_TAIL[3].pack(index, code, base_offset, append_ms, throttle_ms)
    out = bytearray(_FRAME_HEAD.pack(4 + len(prefix) + len(tail), correlation_id))
    out += prefix
    out += tail
    return out


def encode_produce_answers(
    correlation_id: int,
    version: int,
    topics: list[tuple[str, list[PartitionAnswer]]],
    throttle_time_ms: int = 0,
) -> bytearray:
    """The complete frame of a Produce response at `version` from plain values (the
    handler's fast path answers without building kio entities)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Produce response v{version} is not encoded here")
    if len(topics) == 1 and len(topics[0][1]) == 1:
        answer = topics[0][1][0]
        if answer[5] is None and not answer[6]:
            return _encode_one(correlation_id, version, topics[0][0], answer, throttle_time_ms)
    return encode_any_answers(correlation_id, version, topics, throttle_time_ms)


def encode_any_answers(
    correlation_id: int,
    version: int,
    topics: list[tuple[str, list[PartitionAnswer]]],
    throttle_time_ms: int = 0,
) -> bytearray:
    """`encode_produce_answers` field by field, for any answer (the one-partition shortcut's
    reference: tests/unit/test_produce_response.py compares the two)."""
    flexible = version >= 9
    out = bytearray(_FRAME_HEAD.pack(0, correlation_id))
    if flexible:
        out.append(0)  # response header v1: no tagged fields
    _array_length(out, len(topics), flexible)
    for name, partitions in topics:
        _string(out, name, flexible, nullable=False)
        _array_length(out, len(partitions), flexible)
        for index, code, base_offset, append_ms, start_offset, message, record_errors in partitions:
            out += _PARTITION_HEAD.pack(index, code, base_offset, append_ms)
            if version >= 5:
                out += _I64.pack(start_offset)
            if version >= 8:
                _array_length(out, len(record_errors), flexible)
                for batch_index, batch_message in record_errors:
                    out += _I32.pack(batch_index)
                    _string(out, batch_message, flexible, nullable=True)
                    if flexible:
                        out.append(0)
                _string(out, message, flexible, nullable=True)
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    out += _I32.pack(throttle_time_ms)
    if flexible:
        out.append(0)
    _I32.pack_into(out, 0, len(out) - 4)
    return out
