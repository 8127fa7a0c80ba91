"""The compiled record walk (fileformat/_speedups.c) against the pure-Python one it twins.

`skiff.fileformat._speedups.walk` must accept exactly the records `log_validator._walk` accepts,
with the same result, and answer None (never raise) for everything `_walk` refuses, so that the
validator's errors stay those of the Python walk. Both run on one corpus: well-formed batches
of every varint length form, keys, headers and timestamps, the malformed records of
tests/unit/test_log_validator.py, truncations, and random byte flips. The install builds the
module; its absence fails here (the fallback would hide a broken build).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from skiff.fileformat import log_validator, record_build
from skiff.fileformat._speedups import walk as compiled_walk
from skiff.fileformat.batch_header import BATCH_HEADER_SIZE, parse_header
from skiff.fileformat.log_validator import (
    CorruptRecordsError,
    InvalidRecordError,
    InvalidTimestampError,
    validate_produced_batch,
)
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record
from skiff.fileformat.varint import encode_uvarint

from tests.unit.test_log_validator import NOW, encoded, fix_crc, raw_batch


def python_walk(data: bytes, pos: int, count: int, keys_required: bool) -> tuple[int, bool] | None:
    """`_walk`'s result, or None where it raises (the records are refused)."""
    try:
        return log_validator._walk(data, pos, count, keys_required)
    except ValueError:  # _BadRecord is a ValueError too
        return None


def assert_twins(data: bytes, pos: int, count: int) -> None:
    """The compiled walk answers like `_walk` (None for a timestamp delta past 64 bits, which
    only Python's ints hold), and `walk_records`, the validator's entry, always like `_walk`."""
    for keys_required in (False, True):
        fast = compiled_walk(data, pos, count, keys_required)
        slow = python_walk(data, pos, count, keys_required)
        where = (data[pos:].hex(), count, keys_required)
        assert fast == (None if slow is not None and slow[0] >= 2**64 else slow), where
        try:
            combined: object = log_validator.walk_records(data, pos, count, keys_required)
        except ValueError as exc:
            combined = (type(exc), str(exc))
        try:
            reference: object = log_validator._walk(data, pos, count, keys_required)
        except ValueError as exc:
            reference = (type(exc), str(exc))
        assert combined == reference, where


def records_of(batch: bytes) -> tuple[bytes, int]:
    return batch[BATCH_HEADER_SIZE:], parse_header(batch).records_count


def rec(
    *,
    ts: bytes = b"\x00",
    delta: bytes = b"\x00",
    key: bytes = b"\x01",
    value: bytes = b"\x01",
    headers: bytes = b"\x00",
    length: bytes | None = None,
    slack: int = 0,
) -> bytes:
    """One record in wire form from raw field bytes; its length (a zigzag varint) is computed,
    plus `slack`, unless given."""
    body = b"\x00" + ts + delta + key + value + headers  # attributes first
    return (length if length is not None else encode_uvarint(2 * (len(body) + slack))) + body


WELL_FORMED = [
    [Record(0, NOW, None, b"v", ())],
    [Record(i, NOW + i, f"k{i}".encode(), b"v" * i, [("h", b"x")] if i == 1 else ()) for i in range(5)],
    [Record(i, NOW + i * 1_000_000_007, b"k" * 200, b"v" * 300, ()) for i in range(3)],  # 2-byte varints
    [Record(i, NOW - i * 10**12, None, b"v" * 70_000, ()) for i in range(2)],  # 3-byte length, negative ts
    [Record(i, NOW, b"", None, [("", b""), ("k", None), ("x" * 200, b"y" * 200)]) for i in range(4)],
    [Record(i, NOW + 2**40 * i, None, b"", ()) for i in range(200)],  # offset deltas past one byte
]


@pytest.mark.parametrize("records", WELL_FORMED, ids=lambda r: f"{len(r)} records")
def test_well_formed_records_give_the_same_max_timestamp_delta(records):
    data, count = records_of(build_batch(records, base_timestamp=NOW))
    walked = log_validator._walk(data, 0, count, False)
    assert compiled_walk(data, 0, count, False) == walked
    # the second answer: whether a record is older than the batch's base timestamp
    assert walked[1] == any(r.timestamp < NOW for r in records)
    assert_twins(data, 0, count)
    # the walk also starts anywhere in a buffer (the request's bytes)
    assert_twins(b"\xff" * 9 + data, 9, count)


@pytest.mark.parametrize(
    "payload,count",
    [
        (encoded((0, 0, b"k", b"v"), (0, 1, b"k", b"v")), 2),  # repeated offset delta
        (encoded((0, 0, b"k", b"v"), (2, 1, b"k", b"v")), 2),  # skipped offset delta
        (encoded((1, 0, b"k", b"v")), 1),  # first delta not 0
        (encoded((0, 0, None, b"v")), 1),  # keyless (refused when keys are required)
        (encoded((0, 0, b"k", b"v")), 2),  # fewer records than declared
        (encoded((0, 0, b"k", b"v"), (1, 0, b"k", b"v")), 1),  # bytes left over
        (encoded((0, -5, b"k", b"v"), (1, 3, b"k", b"v")), 2),  # a negative timestamp delta
        (rec(), 1),  # the smallest record: null key and value, no headers
        (rec(key=b"\x03"), 1),  # key length -2
        (rec(key=b"\x81\x00"), 1),  # -1 in two bytes: only the one-byte form is a null key
        (rec(value=b"\x81\x00"), 1),  # a null value in two bytes is one
        (rec(value=b"\x05"), 1),  # value length -3
        (rec(delta=b"\x80\x00"), 1),  # offset delta 0 in two bytes
        (rec(headers=b"\x01"), 1),  # header count -1
        (rec(headers=b"\x80\x00"), 1),  # header count 0 in two bytes
        (rec(headers=b"\x02\x03"), 1),  # header key length -2
        (rec(headers=b"\x02\x00\x05"), 1),  # header value length -3
        (rec(headers=b"\x02\x00\x01"), 1),  # a header with a null value
        (rec(headers=b"\x04\x02k\x02v\x00\x01"), 1),  # two headers
        (rec(headers=b"\x04\x02k\x02v"), 1),  # two headers declared, one there
        (rec(slack=1), 1),  # length one too long
        (rec(slack=-1), 1),  # length one too short
        (rec(length=b"\x0b"), 1),  # negative length
        (rec(length=b"\x80" * 5), 1),  # varint too long
        (rec(ts=b"\x80" * 9 + b"\x01"), 1),  # zigzag timestamp delta 2^63
        (rec(ts=b"\x80" * 10), 1),  # varlong too long
        (rec(ts=b"\xff\x7f", key=b"\x02k", value=b"\xc8\x01" + b"v" * 100), 1),  # two-byte forms
        (rec()[:-1], 1),  # runs past the end
        (rec() + rec(delta=b"\x02"), 2),
        (b"", 1),
    ],
)
def test_malformed_and_edge_records_get_the_same_answer(payload, count):
    assert_twins(payload, 0, count)


def test_a_timestamp_delta_past_64_bits_is_left_to_the_python_walk():
    data = rec(ts=b"\x80" * 9 + b"\x02")  # zigzag 2^64: Python's ints hold it, C's do not
    assert compiled_walk(data, 0, 1, False) is None
    assert (
        log_validator.walk_records(data, 0, 1, False)
        == log_validator._walk(data, 0, 1, False)
        == (2**64, False)
    )
    assert_twins(data, 0, 1)


def test_every_truncation_of_a_batch_is_refused_by_both():
    data, count = records_of(build_batch(WELL_FORMED[1], base_timestamp=NOW))
    for cut in range(len(data)):
        assert_twins(data[:cut], 0, count)
        assert compiled_walk(data[:cut], 0, count, False) is None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_byte_flips_get_the_same_answer(data):
    records = data.draw(st.sampled_from(WELL_FORMED[:5]))
    buf = bytearray(build_batch(records, base_timestamp=NOW)[BATCH_HEADER_SIZE:])
    for _ in range(data.draw(st.integers(1, 4))):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    assert_twins(bytes(buf), 0, data.draw(st.integers(1, len(records) + 1)))


def outcome(batch: bytes, **kw) -> tuple[str, str, object] | int:
    try:
        return validate_produced_batch(batch, 0, parse_header(batch), now_ms=NOW, **kw)
    except (InvalidRecordError, InvalidTimestampError, CorruptRecordsError) as exc:
        return type(exc).__name__, str(exc), getattr(exc, "record_errors", ())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_validator_answers_alike_with_and_without_the_compiled_walk(data):
    """Same result or same error (class, message, record errors), on valid and corrupted batches."""
    recs = [
        Record(i, NOW + i, b"k" if i % 2 else None, b"v" * i, [("h", b"1")] if i == 2 else ())
        for i in range(4)
    ]
    batch = bytearray(build_batch(recs))
    for _ in range(data.draw(st.integers(0, 3))):
        batch[data.draw(st.integers(BATCH_HEADER_SIZE, len(batch) - 1))] = data.draw(st.integers(0, 255))
    lie = fix_crc(batch)
    compacted = data.draw(st.booleans())
    assert log_validator._compiled_walk is compiled_walk
    fast = outcome(lie, compacted=compacted)
    log_validator._compiled_walk = None
    try:
        slow = outcome(lie, compacted=compacted)
    finally:
        log_validator._compiled_walk = compiled_walk
    assert fast == slow


def test_a_raw_batch_with_lying_records_is_refused_with_the_python_message():
    batch = raw_batch(encoded((0, 0, b"k", b"v"), (0, 1, b"k", b"v")), 2)
    result = outcome(batch)
    assert result[0] == "InvalidRecordError" and "record 1 has offset delta 0, expected 1" in result[1]


def test_large_batches_walk_without_the_gil_and_agree():
    records = [Record(i, NOW + i, None, b"v" * 1000, ()) for i in range(1000)]
    data, count = records_of(build_batch(records, base_timestamp=NOW))
    assert len(data) > 256 * 1024
    walked = (2 * 999, False)
    assert compiled_walk(data, 0, count, False) == log_validator._walk(data, 0, count, False) == walked
    assert compiled_walk(bytearray(data), 0, count, False) == walked
    assert compiled_walk(memoryview(data), 0, count, False) == walked


def test_record_build_encodes_what_both_walk():
    out = bytearray()
    record_build._encode_record(out, 0, 0, b"k", b"v", ())
    assert_twins(bytes(out), 0, 1)
