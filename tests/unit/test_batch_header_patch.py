"""Patching header fields under the CRC (`fileformat.batch_header`): maxTimestamp, the
timestamp-type bit, and the CRC-32C recomputed after them."""

from __future__ import annotations

import pytest
from skiff.fileformat.batch_header import (
    CRC_OFFSET,
    CorruptBatchError,
    TimestampType,
    TruncatedBatchError,
    check_crc,
    parse_header,
    rewrite_crc,
    set_attribute_bits,
    set_max_timestamp,
    with_max_timestamp,
)
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import decode_records, validate_batch


def _batch(**kw: object) -> bytes:
    return build_batch([(0, 1000, b"k", b"v", []), (1, 1005, None, b"w", [])], **kw)  # type: ignore[arg-type]


def test_set_max_timestamp_keeps_the_batch_valid() -> None:
    buf = bytearray(_batch())
    set_max_timestamp(buf, 0, 7777)
    h = validate_batch(buf, decode=True)
    assert h.max_timestamp == 7777
    assert h.timestamp_type is TimestampType.CREATE_TIME
    assert [r.timestamp for r in decode_records(buf)] == [1000, 1005]


def test_log_append_time_sets_the_bit_and_every_record_reads_the_max() -> None:
    original = _batch(compression=1)
    out = with_max_timestamp(original, 0, 9000, log_append_time=True)
    assert original == _batch(compression=1)  # the input is not touched
    h = validate_batch(out, decode=True)
    assert h.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert h.compression_id == 1
    assert [r.timestamp for r in decode_records(out)] == [9000, 9000]


def test_patching_a_batch_in_the_middle_of_a_buffer() -> None:
    first, second = _batch(), _batch(base_offset=2)
    buf = bytearray(first + second)
    set_max_timestamp(buf, len(first), 4242, log_append_time=True)
    assert bytes(buf[: len(first)]) == first
    assert validate_batch(buf, len(first)).max_timestamp == 4242


def test_set_attribute_bits() -> None:
    buf = bytearray(_batch())
    set_attribute_bits(buf, 0, 0x08)
    check_crc(buf, 0, parse_header(buf))
    assert parse_header(buf).timestamp_type is TimestampType.LOG_APPEND_TIME
    with pytest.raises(ValueError, match="cannot be set"):
        set_attribute_bits(buf, 0, 0x04)  # a codec bit: the records would not match it


def test_rewrite_crc_repairs_and_bounds_are_checked() -> None:
    buf = bytearray(_batch())
    buf[CRC_OFFSET] ^= 0xFF
    with pytest.raises(CorruptBatchError):
        check_crc(buf, 0, parse_header(buf))
    rewrite_crc(buf, 0)
    check_crc(buf, 0, parse_header(buf))
    with pytest.raises(TruncatedBatchError):
        set_max_timestamp(buf[:-1], 0, 1)


def test_a_known_header_gives_the_same_bytes() -> None:
    buf = _batch(compression=2)
    header = parse_header(buf)
    assert with_max_timestamp(buf, 0, 31, log_append_time=True, header=header) == with_max_timestamp(
        buf, 0, 31, log_append_time=True
    )
