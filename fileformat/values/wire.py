"""Confluent's wire format, found for a whole batch of payloads at once.

A serialized record is: byte 0 the magic byte 0, bytes 1-4 the schema id (big-endian,
signed 32-bit, > 0 when registered), then for PROTOBUF the message indexes (a zigzag
varint count, then that many zigzag varints: the path of the message type in the file,
e.g. [0] for the first top-level message; the count 0 alone, one byte, means [0]), then the
body (Avro binary without a container, JSON text, Protobuf binary).

`frame_batch` reads the magic bytes and schema ids of every payload with NumPy over the
Arrow array's offsets and data buffer (no Python object per payload); the Protobuf message
indexes are decoded in Python only for payloads whose index byte is not the common 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

HEADER_SIZE = 5  # magic byte + 4-byte schema id
MAX_MESSAGE_INDEXES = 64  # a deeper nesting path is refused (bounded parse)


@dataclass
class Frames:
    """Per payload: `schema_id` (-1: null payload, -2: not in the wire format),
    `body_start` / `body_end` (byte positions in `data`), and for Protobuf the message
    indexes (None where the payload is not framed)."""

    data: bytes
    schema_id: np.ndarray
    body_start: np.ndarray
    body_end: np.ndarray
    message_indexes: list[tuple[int, ...] | None] | None = None


NULL = -1
NOT_FRAMED = -2


def _buffers(payloads: pa.Array) -> tuple[bytes, np.ndarray, np.ndarray]:
    """The data buffer as bytes, and the start and end of each payload in it."""
    if pa.types.is_large_binary(payloads.type):
        payloads = payloads.cast(pa.binary())
    if not pa.types.is_binary(payloads.type):
        raise TypeError(f"payloads must be binary, got {payloads.type}")
    buffers = payloads.buffers()
    n = len(payloads)
    if buffers[1] is None:  # an empty array may have no buffers
        return b"", np.zeros(n, np.int64), np.zeros(n, np.int64)
    offsets = np.frombuffer(buffers[1], dtype=np.int32)[payloads.offset : payloads.offset + n + 1]
    offsets = offsets.astype(np.int64)
    data_buffer = buffers[2]
    data = data_buffer.to_pybytes() if data_buffer is not None else b""
    return data, offsets[:-1], offsets[1:]


def frame_batch(payloads: pa.Array, *, protobuf: bool = False) -> Frames:
    data, starts, ends = _buffers(payloads)
    n = len(payloads)
    valid = (
        np.ones(n, dtype=bool)
        if payloads.null_count == 0
        else payloads.is_valid().to_numpy(zero_copy_only=False)
    )
    raw = np.frombuffer(data, dtype=np.uint8)
    framed = valid & (ends - starts >= HEADER_SIZE)
    if len(raw):
        first = np.clip(starts, 0, len(raw) - 1)
        framed &= raw[first] == 0
    else:
        framed &= False
    schema_id = np.where(valid, NOT_FRAMED, NULL).astype(np.int64)
    idx = np.flatnonzero(framed)
    if len(idx):
        at = starts[idx]
        id_bytes = raw[at[:, None] + np.arange(1, 5)].astype(np.int64)
        ids = (id_bytes[:, 0] << 24) | (id_bytes[:, 1] << 16) | (id_bytes[:, 2] << 8) | id_bytes[:, 3]
        schema_id[idx] = ids
    frames = Frames(data, schema_id, starts + HEADER_SIZE, ends.copy())
    if protobuf:
        _message_indexes(frames, raw)
    return frames


def _message_indexes(frames: Frames, raw: np.ndarray) -> None:
    """Fill `message_indexes` and move each body start past them (an unreadable index list
    makes the payload NOT_FRAMED)."""
    n = len(frames.schema_id)
    out: list[tuple[int, ...] | None] = [None] * n
    framed = frames.schema_id >= 0
    has_byte = framed & (frames.body_start < frames.body_end)
    common = np.zeros(n, dtype=bool)
    if len(raw) and has_byte.any():
        pos = np.clip(frames.body_start, 0, len(raw) - 1)
        common = has_byte & (raw[pos] == 0)
    for i in np.flatnonzero(common).tolist():
        out[i] = (0,)
    frames.body_start[common] += 1
    for i in np.flatnonzero(framed & ~common).tolist():
        parsed = read_indexes(frames.data, int(frames.body_start[i]), int(frames.body_end[i]))
        if parsed is None:
            frames.schema_id[i] = NOT_FRAMED
            continue
        out[i], frames.body_start[i] = parsed
    frames.message_indexes = out


def _zigzag_varint(data: bytes, pos: int, end: int) -> tuple[int, int] | None:
    value = shift = 0
    while pos < end and shift < 64:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
    return None


def read_indexes(data: bytes, pos: int, end: int) -> tuple[tuple[int, ...], int] | None:
    """The message indexes at `pos` and where the body starts (None: malformed)."""
    head = _zigzag_varint(data, pos, end)
    if head is None:
        return None
    count, pos = head
    if count == 0:
        return (0,), pos
    if not 0 < count <= MAX_MESSAGE_INDEXES:
        return None
    indexes = []
    for _ in range(count):
        item = _zigzag_varint(data, pos, end)
        if item is None or item[0] < 0:
            return None
        indexes.append(item[0])
        pos = item[1]
    return tuple(indexes), pos
