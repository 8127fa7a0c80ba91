"""The executors' vectorised decoder (spark.decode) against the reference record decoder
(fileformat.record_decode.decode_records): every field, every codec, nulls, headers, timestamp
types, offset ranges, present-offset bitmaps and malformed records."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap
from skiff.fileformat.batch_header import Compression, TimestampType, iter_batches
from skiff.fileformat.chunk_reader import ChunkLocation, ChunkReadError
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import decode_records
from skiff.spark import decode_kernels
from skiff.spark.decode import RecordBatchBuilder, arrow_schema

T0 = 1_700_000_000_000


def _records(n: int, start: int = 0) -> list[tuple[int, int, bytes | None, bytes | None, list]]:
    out = []
    for i in range(start, start + n):
        key = None if i % 5 == 0 else f"k{i}".encode()
        value = None if i % 7 == 3 else bytes([i % 256]) * (i % 40)
        headers = [("h", b"x" * (i % 3)), ("nul", None)] if i % 2 else []
        out.append((i - start, T0 + i * 3, key, value, headers))
    return out


def _chunk(batches: list[bytes], base_offset: int, *, absolute: bool = False, present=None) -> tuple:
    data = b"".join(batches)
    last = base_offset - 1
    count = 0
    for _pos, h in iter_batches(data):
        last = (h.base_offset if absolute else last + 1) + h.last_offset_delta
        count += h.records_count
    loc = ChunkLocation(1, "obj", 100, len(data), base_offset, last, count, T0, absolute, present)
    return loc, data


def _expected(loc: ChunkLocation, data: bytes) -> list[tuple]:
    from skiff.fileformat.chunk_reader import iter_chunk_batches

    out = []
    for b in iter_chunk_batches(loc, data):
        ts_type = 1 if b.header.attributes & 0x08 else 0
        for r in decode_records(data, b.position, header=b.header):
            headers = [{"key": k, "value": v} for k, v in r.headers]
            out.append((r.key, r.value, b.base_offset + r.offset_delta, r.timestamp, ts_type, headers))
    return out


def _rows(batches: list[pa.RecordBatch]) -> list[tuple]:
    out = []
    for rb in batches:
        d = rb.to_pydict()
        for i in range(rb.num_rows):
            ts = d["timestamp"][i]
            ms = int(ts.timestamp() * 1000) if ts is not None else None
            out.append(
                (d["key"][i], d["value"][i], d["offset"][i], ms, d["timestampType"][i], d["headers"][i])
            )
    return out


def _read(loc, data, start=0, end=2**62, **kw) -> list[pa.RecordBatch]:
    builder = RecordBatchBuilder("orders", 3, start, end, include_headers=True, **kw)
    out = list(builder.add_chunk(loc, data))
    last = builder.flush()
    return out + ([last] if last is not None else [])


@pytest.mark.parametrize("codec", list(Compression))
def test_every_codec_decodes_exactly(codec: Compression) -> None:
    batches = [build_batch(_records(50, s), compression=codec) for s in (0, 50, 100)]
    loc, data = _chunk(batches, 1000)
    got = _read(loc, data)
    assert _rows(got) == _expected(loc, data)
    assert [r[2] for r in _rows(got)] == list(range(1000, 1150))
    for rb in got:
        assert rb.schema == arrow_schema(True)
        assert rb.column("topic").to_pylist() == ["orders"] * rb.num_rows
        assert rb.column("partition").to_pylist() == [3] * rb.num_rows
        assert rb.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")


def test_log_append_time_uses_the_batch_max_timestamp() -> None:
    batch = build_batch(_records(4), timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=T0 + 999)
    loc, data = _chunk([batch], 0)
    rows = _rows(_read(loc, data))
    assert [(r[3], r[4]) for r in rows] == [(T0 + 999, 1)] * 4


def test_offset_range_and_small_batches() -> None:
    batches = [build_batch(_records(10, s)) for s in range(0, 100, 10)]
    loc, data = _chunk(batches, 500)
    got = _read(loc, data, start=517, end=583, max_rows=16)
    assert [r[2] for r in _rows(got)] == list(range(517, 583))
    assert all(rb.num_rows <= 26 for rb in got)  # flushed as the buffer fills, whole batches at a time


def test_compacted_chunk_keeps_survivors_at_original_offsets() -> None:
    survivors = [0, 3, 4, 9, 15, 16, 22]
    recs = [(o, T0 + o, f"k{o}".encode(), f"v{o}".encode(), []) for o in survivors]
    batch = build_batch(recs, base_offset=200, last_offset_delta=23)
    present = BitMap(survivors + [23])  # 23 is in the bitmap but not in the batch: absent
    loc, data = _chunk([batch], 200, absolute=True, present=BitMap.serialize(present))
    rows = _rows(_read(loc, data))
    assert [r[2] for r in rows] == [200 + o for o in survivors]
    assert [r[1] for r in rows] == [f"v{o}".encode() for o in survivors]
    # the bitmap is the truth: an offset missing from it is not returned
    loc2, data2 = _chunk([batch], 200, absolute=True, present=BitMap.serialize(BitMap([0, 9, 22])))
    assert [r[2] for r in _rows(_read(loc2, data2))] == [200, 209, 222]


def test_control_batches_are_skipped() -> None:
    data_batch = build_batch(_records(3))
    control = build_batch([(0, T0, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", [])], is_control=True)
    loc, data = _chunk([data_batch, control], 0)
    assert [r[2] for r in _rows(_read(loc, data))] == [0, 1, 2]


def test_malformed_records_raise_naming_the_batch() -> None:
    batch = bytearray(build_batch(_records(5)))
    batch[61] = 0x7E  # the first record's length varint now claims 63 bytes
    loc, data = _chunk([bytes(batch)], 0)
    with pytest.raises(ChunkReadError, match="obj@100"):
        _read(loc, data)


def test_kernels_compiled_and_interpreted_agree() -> None:
    batch = build_batch(_records(30))
    buf = np.frombuffer(batch[61:], dtype=np.uint8)
    arrays = [np.empty(30, np.int64) for _ in range(8)]
    meta = [np.array([v], np.int64) for v in (0, len(buf), 30, 7, T0, -1)]
    fn = getattr(decode_kernels.walk_records, "py_func", decode_kernels.walk_records)
    assert fn(buf, *meta, *arrays) == (30, 0)
    compiled = [np.empty(30, np.int64) for _ in range(8)]
    assert decode_kernels.walk_records(buf, *meta, *compiled) == (30, 0)
    for a, b in zip(arrays, compiled, strict=True):
        assert (a == b).all()
