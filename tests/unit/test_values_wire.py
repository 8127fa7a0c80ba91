"""skiff.fileformat.values.wire: Confluent's framing read for a whole batch (schema ids, body
bounds, Protobuf message indexes), on sliced, large and empty Arrow arrays."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from skiff.fileformat.values import wire


def test_ids_and_bodies_of_a_sliced_array() -> None:
    payloads = pa.array(
        [b"skip", b"\x00\x00\x00\x01\x00body", None, b"\x01\x00\x00\x00\x02x", b"\x00\x7f\xff\xff\xff"]
    )
    frames = wire.frame_batch(payloads.slice(1))
    assert frames.schema_id.tolist() == [256, wire.NULL, wire.NOT_FRAMED, 2**31 - 1]
    first = frames.data[frames.body_start[0] : frames.body_end[0]]
    assert first == b"body"
    assert frames.body_start[3] == frames.body_end[3]  # an empty body


def test_large_binary_and_empty() -> None:
    frames = wire.frame_batch(pa.array([b"\x00\x00\x00\x00\x07{}"], pa.large_binary()))
    assert frames.schema_id.tolist() == [7]
    empty = wire.frame_batch(pa.array([], pa.binary()))
    assert len(empty.schema_id) == 0
    assert wire.frame_batch(pa.array([None, None], pa.binary())).schema_id.tolist() == [wire.NULL] * 2


def test_protobuf_message_indexes() -> None:
    head = b"\x00\x00\x00\x00\x03"
    payloads = pa.array([head + b"\x00B", head + b"\x04\x02\x04B", head + b"\x03", head + b"\x02"])
    frames = wire.frame_batch(payloads, protobuf=True)
    assert frames.message_indexes == [(0,), (1, 2), None, None]
    assert frames.schema_id.tolist() == [
        3,
        3,
        wire.NOT_FRAMED,
        wire.NOT_FRAMED,
    ]  # negative count; missing index
    assert [frames.data[s:e] for s, e in zip(frames.body_start[:2], frames.body_end[:2], strict=True)] == [
        b"B",
        b"B",
    ]
    assert wire.read_indexes(b"\x80" * 20, 0, 20) is None  # an unterminated varint
    assert isinstance(frames.body_start, np.ndarray)
