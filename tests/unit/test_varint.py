"""`fileformat.varint`, the one owner of Kafka's varint rule, and the code held to it: the
compiled kernels (numba in `spark.decode_kernels`, NumPy in `compactor.record_scan`), which
keep their own loops for speed, and the inline one- and two-byte reads of the record walks."""

from __future__ import annotations

import random

import numpy as np
import pytest
from skiff.compactor import record_scan
from skiff.fileformat.batch_header import BATCH_HEADER_SIZE, parse_header
from skiff.fileformat.log_validator import validate_produced_batch
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record, decode_records, scan_records
from skiff.fileformat.varint import (
    MAX_VARINT_BYTES,
    MAX_VARLONG_BYTES,
    TruncatedVarintError,
    VarintError,
    VarintTooLongError,
    encode_uvarint,
    encode_varint,
    read_uvarint,
    read_varint,
    read_varlong,
    unzigzag,
    uvarint_size,
    varint_size,
    write_uvarint,
    write_varint,
    zigzag,
)
from skiff.spark import decode_kernels

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def _edge_values() -> list[int]:
    """0, +-1, every size boundary of the zigzag form (1..10 bytes), int32/int64 limits."""
    out = {0, -1, 1, I32_MIN, I32_MAX, I64_MIN, I64_MAX, I32_MIN - 1, I32_MAX + 1}
    for k in range(1, 10):
        z = 1 << (7 * k)  # the first zigzag value that takes k + 1 bytes
        for zz in (z - 1, z, z + 1):
            out.add(unzigzag(zz))
    rng = random.Random(20)
    out.update(rng.randint(I64_MIN, I64_MAX) for _ in range(2000))
    out.update(rng.randint(-100_000, 100_000) for _ in range(2000))
    return sorted(out)


EDGE = _edge_values()


# ---------------------------------------------------------------------------------------------
# the reference


def test_known_encodings_match_kafka() -> None:
    assert encode_varint(0) == b"\x00"
    assert encode_varint(-1) == b"\x01"
    assert encode_varint(1) == b"\x02"
    assert encode_varint(-64) == b"\x7f"
    assert encode_varint(64) == b"\x80\x01"
    assert encode_uvarint(300) == b"\xac\x02"
    assert encode_varint(I32_MIN) == b"\xff\xff\xff\xff\x0f"
    assert encode_varint(I64_MIN) == b"\xff" * 9 + b"\x01"


@pytest.mark.parametrize("v", EDGE[:: max(1, len(EDGE) // 400)] + [I64_MIN, I64_MAX, 0, -1])
def test_round_trip_and_size(v: int) -> None:
    raw = encode_varint(v)
    assert len(raw) == varint_size(v)
    assert read_varlong(raw, 0) == (v, len(raw))
    assert read_varint(b"pad" + raw + b"tail", 3, MAX_VARLONG_BYTES) == (v, 3 + len(raw))
    out = bytearray()
    write_varint(out, v)
    assert bytes(out) == raw
    assert unzigzag(zigzag(v)) == v
    assert zigzag(v) >= 0
    if I32_MIN <= v <= I32_MAX:
        assert len(raw) <= MAX_VARINT_BYTES
        assert read_varint(raw, 0) == (v, len(raw))


def test_unsigned_round_trip() -> None:
    for z in (0, 1, 127, 128, 16383, 16384, 2**31 - 1, 2**32 - 1):
        raw = encode_uvarint(z)
        assert len(raw) == uvarint_size(z)
        assert read_uvarint(raw, 0) == (z, len(raw))
    with pytest.raises(ValueError):
        write_uvarint(bytearray(), -1)


def test_malformed_input() -> None:
    with pytest.raises(TruncatedVarintError, match="truncated"):
        read_uvarint(b"\x80", 0)
    with pytest.raises(TruncatedVarintError):
        read_uvarint(b"\x80\x80\x01", 0, end=2)  # the terminator lies past `end`
    with pytest.raises(IndexError):  # walks that catch IndexError for "ran past the end"
        read_varint(b"", 0)
    with pytest.raises(VarintTooLongError, match="longer than 5 bytes"):
        read_uvarint(b"\x80" * 5 + b"\x01", 0)
    with pytest.raises(VarintTooLongError, match="longer than 10 bytes"):
        read_varlong(b"\x80" * 10 + b"\x01", 0)
    assert issubclass(VarintTooLongError, VarintError)
    assert issubclass(VarintError, ValueError)


# ---------------------------------------------------------------------------------------------
# the compiled kernels against the reference


def _kernel_forms() -> list[object]:
    forms: list[object] = [decode_kernels._varint]
    py_func = getattr(decode_kernels._varint, "py_func", None)  # numba keeps the Python source
    if py_func is not None:
        forms.append(py_func)
    return forms


@pytest.mark.parametrize("kernel", _kernel_forms(), ids=["compiled", "python"][: len(_kernel_forms())])
def test_spark_kernel_matches_reference(kernel) -> None:
    for v in EDGE:
        raw = encode_varint(v)
        buf = np.frombuffer(b"\x07" + raw + b"\x05", np.uint8)
        value, pos = kernel(buf, 1, len(buf))
        assert (int(value), int(pos)) == (v, 1 + len(raw)), v
    # malformed: truncated (by the buffer or by `end`) and longer than 10 bytes
    buf = np.frombuffer(b"\x80\x80\x80", np.uint8)
    assert int(kernel(buf, 0, 3)[1]) == -1
    buf = np.frombuffer(b"\x80\x01", np.uint8)
    assert int(kernel(buf, 0, 1)[1]) == -1
    buf = np.frombuffer(b"\x80" * 10 + b"\x01", np.uint8)
    assert int(kernel(buf, 0, 11)[1]) == -1
    with pytest.raises(VarintError):
        read_varlong(bytes(buf), 0)


def test_numpy_column_kernel_matches_reference() -> None:
    raws = [encode_varint(v) for v in EDGE]
    starts = np.cumsum([0] + [len(r) for r in raws[:-1]]).astype(np.int64)
    buf = np.frombuffer(b"".join(raws) + bytes(16), np.uint8)
    values, nxt = record_scan._varint(buf, starts)
    assert values.tolist() == EDGE
    assert nxt.tolist() == [int(s) + len(r) for s, r in zip(starts, raws, strict=True)]
    too_long = np.frombuffer(b"\x80" * 10 + b"\x01" + bytes(16), np.uint8)
    with pytest.raises(record_scan._Invalid):
        record_scan._varint(too_long, np.zeros(1, np.int64))


# ---------------------------------------------------------------------------------------------
# the record walks' inline reads, through every varint size a record field can take


@pytest.mark.parametrize("value_bytes", [0, 63, 64, 8191, 8192, 70_000])
def test_record_walks_read_every_length_form(value_bytes: int) -> None:
    base = 1_700_000_000_000
    ts = [base, base - 1, base + 63, base + 64, base + 8191, base + 8192, base + 2**35, base - 2**40]
    recs = [
        Record(
            i, t, b"k" * (i * 40), b"v" * value_bytes if i % 3 else None, [("h" * 70, b"x" * 65)] * (i % 2)
        )
        for i, t in enumerate(ts)
    ]
    buf = build_batch(recs)
    header = parse_header(buf)
    decoded = decode_records(buf)
    assert [(r.offset_delta, r.timestamp, r.key, r.value, list(r.headers)) for r in decoded] == [
        (r.offset_delta, r.timestamp, r.key, r.value, list(r.headers)) for r in recs
    ]
    scanned = scan_records(buf[BATCH_HEADER_SIZE:], len(recs))
    assert [(s.offset_delta, s.timestamp_delta + base, s.key, s.tombstone) for s in scanned] == [
        (r.offset_delta, r.timestamp, r.key, r.value is None) for r in recs
    ]
    assert validate_produced_batch(buf, 0, header, now_ms=0) == max(ts)
