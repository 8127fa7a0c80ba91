"""The records of many batches at once, as NumPy columns (the cleaner's vectorised scan).

`fileformat.record_decode.scan_records` walks one batch's records in Python (about 0.7 us a
record); the cleaner instead scans the data batches of a whole chunk together:

1. The batches' record payloads (decompressed where needed) are joined into one byte
   array, padded with `PAD_BYTES` zeros so that a varint or key read that starts inside
   it never leaves it.
2. Record starts. Only the length varint chains records, so the starts are found in
   lockstep across batches: step j reads the j-th record's length in every batch that
   has more than j records, as one NumPy gather. Once fewer than
   `LOCKSTEP_MIN_BATCHES` batches are left (a few long batches), their remaining records
   are walked in Python, reading the length varint only (~0.15 us a record; `fileformat.varint` beyond one byte).
3. Every other field is decoded from the starts as whole columns: attributes (skipped),
   timestampDelta (varlong), offsetDelta, key length, key position, value length (-1:
   tombstone). Record headers are not read (the cleaner copies records as encoded).

Validation is stricter than `scan_records` (every field must lie inside its record): when
a column check fails, the batches are scanned again by `scan_records`, which raises its
`CorruptBatchError` (or, for odd but valid records, gives the same answer), so the two
scans accept the same batches with the same results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from skiff.compactor.md5_vec import MAX_VECTOR_KEY_BYTES
from skiff.fileformat.batch_header import DEFAULT_MAX_DECOMPRESSED_BYTES
from skiff.fileformat.chunk_reader import ChunkBatch
from skiff.fileformat.record_decode import records_view, scan_records
from skiff.fileformat.varint import MAX_VARINT_BYTES, VarintError, read_uvarint

PAD_BYTES = MAX_VECTOR_KEY_BYTES + 73  # > a key read, > 5 varints of 10 bytes
LOCKSTEP_MIN_BATCHES = 16
MIN_RECORD_BYTES = 7  # a length varint and the 6 bytes a record needs at least

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
BytesLike = bytes | bytearray | memoryview


@dataclass
class RecordColumns:
    """The records of a run of batches, one array entry per record, batch after batch."""

    payload: bytes  # the batches' records, joined (no padding)
    buf: U8  # `payload` plus PAD_BYTES zeros, as uint8 (positions below index it)
    batch_first: I64  # batch i's records are [batch_first[i], batch_first[i + 1])
    start: I64  # first byte of the record (its length varint)
    end: I64  # one past its last byte
    ts_end: I64  # first byte after its timestampDelta
    offset_delta: I64
    timestamp_delta: I64
    key_buf: U8  # the buffer key_start indexes (`buf`, or the keys alone after a fallback)
    key_start: I64
    key_len: I64  # -1: null key
    tombstone: npt.NDArray[np.bool_]  # null value

    @property
    def count(self) -> int:
        return len(self.start)


class _Invalid(Exception):
    """A column check failed: rescan with `scan_records` (see the module docstring)."""


def batch_payload(data: BytesLike, cb: ChunkBatch, max_decompressed_bytes: int) -> BytesLike:
    """The records of one batch of `data`, decompressed (a view when uncompressed)."""
    return records_view(data, cb.position, cb.header, max_decompressed_bytes)


def scan_batches(
    data: BytesLike,
    batches: Sequence[ChunkBatch],
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> RecordColumns:
    """The records of `batches` (data batches of `data`) as columns."""
    payloads = [batch_payload(data, cb, max_decompressed_bytes) for cb in batches]
    sizes = np.fromiter((len(p) for p in payloads), np.int64, len(payloads))
    counts = np.fromiter((cb.header.records_count for cb in batches), np.int64, len(batches))
    payload = b"".join(payloads)
    pstart = np.zeros(len(batches) + 1, np.int64)
    np.cumsum(sizes, out=pstart[1:])
    try:
        if (counts < 0).any() or (counts * MIN_RECORD_BYTES > sizes).any():
            raise _Invalid
        return _vector_scan(payload, pstart, counts)
    except _Invalid:
        return _scalar_scan(payload, pstart, batches)


def _varint(buf: U8, pos: I64) -> tuple[I64, I64]:
    """Zigzag varints at `pos` (vectorised): (values, positions after them).

    `fileformat.varint.read_varint` over an array of positions, as a NumPy kernel; the test
    in tests/unit/test_varint.py holds the two to the same answers. Longer than 10 bytes is
    `_Invalid` (the scalar scan then names the record)."""
    b = buf[pos]
    val = (b & 0x7F).astype(np.int64)
    nxt = pos + 1
    more = np.flatnonzero(b >= 0x80)
    shift = 7
    while more.size:
        if shift > 63:
            raise _Invalid
        p = nxt[more]
        b = buf[p]
        val[more] |= (b & 0x7F).astype(np.int64) << shift
        nxt[more] = p + 1
        more = more[b >= 0x80]
        shift += 7
    # int64 shifts are arithmetic: mask the sign bit back out (ten-byte varlongs, |value| >= 2**62)
    return ((val >> 1) & 0x7FFFFFFFFFFFFFFF) ^ -(val & 1), nxt


def _starts(payload: bytes, buf: U8, pstart: I64, counts: I64) -> I64:
    n = int(counts.sum())
    starts = np.empty(n, np.int64)
    first = np.zeros(len(counts), np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    pos = pstart[:-1].copy()
    pend = pstart[1:]
    act = np.flatnonzero(counts > 0)
    j = 0
    while act.size >= LOCKSTEP_MIN_BATCHES:
        p = pos[act]
        length, body = _varint(buf, p)
        nxt = body + length
        if (length < 6).any() or (nxt > pend[act]).any():
            raise _Invalid
        starts[first[act] + j] = p
        pos[act] = nxt
        j += 1
        act = act[counts[act] > j]
    for i in act.tolist():  # the few long batches left: walk their length varints
        q = int(pos[i])
        end = int(pend[i])
        k = int(first[i])
        for r in range(k + j, k + int(counts[i])):
            if q >= end:
                raise _Invalid
            starts[r] = q
            v = payload[q]
            if v < 0x80:
                q += 1
            else:
                try:
                    v, q = read_uvarint(payload, q, MAX_VARINT_BYTES, end)
                except VarintError:
                    raise _Invalid from None
            size = (v >> 1) ^ -(v & 1)
            q += size
            if size < 6 or q > end:
                raise _Invalid
        pos[i] = q
    if (pos != pend).any():
        raise _Invalid
    return starts


def _vector_scan(payload: bytes, pstart: I64, counts: I64) -> RecordColumns:
    buf = np.frombuffer(payload + bytes(PAD_BYTES), np.uint8)
    start = _starts(payload, buf, pstart, counts)
    length, p = _varint(buf, start)
    end = p + length
    p += 1  # attributes
    ts_delta, ts_end = _varint(buf, p)
    offset_delta, p = _varint(buf, ts_end)
    key_len, key_start = _varint(buf, p)
    if (key_len < -1).any() or (key_len > end - key_start).any():
        raise _Invalid
    key_end = key_start + np.maximum(key_len, 0)
    value_len, p = _varint(buf, key_end)
    if (value_len < -1).any() or (p > end).any():
        raise _Invalid
    batch_first = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=batch_first[1:])
    return RecordColumns(
        payload,
        buf,
        batch_first,
        start,
        end,
        ts_end,
        offset_delta,
        ts_delta,
        buf,
        key_start,
        key_len,
        value_len == -1,
    )


def _scalar_scan(payload: bytes, pstart: I64, batches: Sequence[ChunkBatch]) -> RecordColumns:
    """`scan_records` batch by batch (raises CorruptBatchError on malformed records)."""
    cols: list[list[int]] = [[] for _ in range(6)]
    keys: list[bytes] = []
    key_len: list[int] = []
    tomb: list[bool] = []
    batch_first = [0]
    for i, cb in enumerate(batches):
        a, b = int(pstart[i]), int(pstart[i + 1])
        recs = scan_records(payload[a:b], cb.header.records_count, cb.position)
        for r in recs:
            cols[0].append(a + r.start)
            cols[1].append(a + r.end)
            cols[2].append(a + r.ts_end)
            cols[3].append(r.offset_delta)
            cols[4].append(r.timestamp_delta)
            key_len.append(-1 if r.key is None else len(r.key))
            keys.append(r.key or b"")
            tomb.append(r.tombstone)
        batch_first.append(batch_first[-1] + len(recs))
    arr = [np.array(c, np.int64) for c in cols]
    kl = np.array(key_len, np.int64)
    ks = np.zeros(len(kl), np.int64)
    if len(kl):
        np.cumsum(np.maximum(kl, 0)[:-1], out=ks[1:])
    return RecordColumns(
        payload,
        np.frombuffer(payload + bytes(PAD_BYTES), np.uint8),
        np.array(batch_first, np.int64),
        arr[0],
        arr[1],
        arr[2],
        arr[3],
        arr[4],
        np.frombuffer(b"".join(keys) + bytes(PAD_BYTES), np.uint8),
        ks,
        kl,
        np.array(tomb, np.bool_),
    )
