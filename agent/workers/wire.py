"""The pod writer's wire format: what a worker and the pod's writer say over their Unix socket.

A pod with `workers` > 1 (agent.workers) runs one writer process and N worker processes;
each worker's produce buffer is a client of the writer (agent.workers.writer_client), which
owns the one real `ProduceBuffer` of the pod (agent.workers.writer_server). Messages are
length-prefixed frames on a stream socket, in order, both ways:

    frame   := length:u32 kind:u8 payload            (length counts kind + payload)

Worker -> writer:

    APPEND  := count:u32 append*                     (kind 1; every append of one loop turn)
    append  := append_id:u64 topic_id:16 partition:i32 batch_count:u32 batch*
    batch   := offset_count:i32 record_count:i32 min_timestamp:i64 max_timestamp:i64
               producer_id:i64 producer_epoch:i16 base_sequence:i32 timestamp_type:u8
               is_transactional:u8 txn_id_length:i16 (-1: none) data_length:u32
               ring_position:i64 txn_id:txn_id_length data
    data    := nothing when ring_position >= 0 (the bytes are in the worker's ring, at that
               position), else data_length bytes
    FLUSH   := flush_id:u64                          (kind 2; seal now, answer FLUSHED)

The ring: at connection the worker sends one byte and, with it (SCM_RIGHTS), the file
descriptor of a memory file (memfd) of `max_buffered_bytes`, which both processes map. A
batch's bytes are copied into the ring once by the worker and read from it by the writer
(into the file it builds), so they cross no socket; the worker reuses a region once the
batch's outcome is back (agent.workers.ring). A batch that does not fit travels inline.

Writer -> worker:

    FILE    := key_length:u16 key post_seal_estimate_s:f64 chunk_count:u32 chunk*
                                                     (kind 10; sent to every worker, before
                                                      any RESULTS of the file's appends)
    chunk   := topic_id:16 partition:i32 flags:u8 (1 plain, 2 markers)
               location_count:u32 location* batch_count:u32 placed*
    location:= chunk_id:i64 byte_position:u64 byte_length:u32 base_offset:i64
               last_offset:i64 record_count:i64 max_timestamp:i64 min_timestamp:i64
               (i64 min: none)
    placed  := base_offset:i64 byte_position:u64 byte_length:u32
               (each stored batch: where a worker's own bytes lie in the file)
    RESULTS := count:u32 result*                     (kind 11)
    result  := append_id:u64 batch_count:u32 outcome*
    outcome := error_code:i16 base_offset:i64 log_append_time_ms:i64 log_start_offset:i64
               duplicate:u8 message_length:i16 (-1: none) message
    FLUSHED := flush_id:u64                          (kind 12)

Integers are big-endian. A frame longer than `MAX_FRAME_BYTES` is refused by the reader
(the writer and its workers are one pod's processes, but a bound is a bound). Decoding is
strict: a frame whose fields do not add up to its length raises `WireError`.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from skiff.agent.produce_buffer import PendingBatch
from skiff.fileformat.chunk_reader import ChunkLocation
from skiff.metadata.types import BatchResult

APPEND, FLUSH = 1, 2
FILE, RESULTS, FLUSHED = 10, 11, 12

# One frame: the largest append a worker sends is one Produce request's batches for one
# partition (bounded by the agent's request size), and a FILE frame is one file's chunks.
MAX_FRAME_BYTES = 256 * 1024 * 1024

_FRAME = struct.Struct(">IB")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_APPEND_HEAD = struct.Struct(">Q16siI")
_BATCH = struct.Struct(">iiqqqhiBBhIq")
_FILE_HEAD = struct.Struct(">H")
_F64_U32 = struct.Struct(">dI")
_CHUNK_HEAD = struct.Struct(">16siBI")
_LOCATION = struct.Struct(">qQIqqqqq")
_PLACED = struct.Struct(">qQI")
_RESULT_HEAD = struct.Struct(">QI")
_OUTCOME = struct.Struct(">hqqqBh")
_NO_TIMESTAMP = -(2**63)


class WireError(ValueError):
    """A frame that does not decode: the peer is not speaking this format."""


@dataclass(frozen=True)
class Append:
    append_id: int
    topic_id: uuid.UUID
    partition: int
    batches: tuple[PendingBatch, ...]


@dataclass(frozen=True)
class PlacedBatch:
    base_offset: int
    byte_position: int
    byte_length: int


@dataclass(frozen=True)
class FileChunk:
    topic_id: uuid.UUID
    partition: int
    plain: bool  # no transactional and no control batch
    markers: bool  # a control batch (a transaction closed)
    locations: tuple[ChunkLocation, ...]
    placed: tuple[PlacedBatch, ...]


@dataclass(frozen=True)
class CommittedFileNews:
    """What every worker learns of a committed file (agent.runtime's on_committed, remote)."""

    object_key: str
    post_seal_estimate_s: float
    chunks: tuple[FileChunk, ...]


HELLO_BYTES = 9  # b"R" and the ring's size (u64), sent with the ring's descriptor


def hello(ring_bytes: int) -> bytes:
    return b"R" + _U64.pack(ring_bytes)


def parse_hello(data: bytes) -> int:
    """The ring's size from a worker's hello."""
    if len(data) != HELLO_BYTES or data[:1] != b"R":
        raise WireError("a worker's first bytes are not its hello")
    return int(_U64.unpack_from(data, 1)[0])


def frame(kind: int, payload: bytes | bytearray) -> bytes:
    return _FRAME.pack(len(payload) + 1, kind) + payload


# --------------------------------------------------------------------------- worker -> writer


AppendOut = tuple[int, uuid.UUID, int, Sequence[PendingBatch], Sequence[int] | None]


def encode_appends(appends: Iterable[AppendOut]) -> list[bytes]:
    """The pieces of one APPEND frame. Each append: (id, topic, partition, batches, each
    batch's ring position or None for all inline)."""
    parts: list[bytes] = [b""]
    count = 0
    size = 4
    for append_id, topic_id, partition, batches, positions in appends:
        count += 1
        head = _APPEND_HEAD.pack(append_id, topic_id.bytes, partition, len(batches))
        parts.append(head)
        size += len(head)
        for i, b in enumerate(batches):
            ring_position = -1 if positions is None else positions[i]
            txn = b.transactional_id.encode() if b.transactional_id is not None else b""
            fixed = _BATCH.pack(
                b.offset_count,
                b.record_count,
                b.min_timestamp,
                b.max_timestamp,
                b.producer_id,
                b.producer_epoch,
                b.base_sequence,
                b.timestamp_type,
                b.is_transactional,
                len(txn) if b.transactional_id is not None else -1,
                len(b.data),
                ring_position,
            )
            parts.append(fixed + txn)
            size += len(fixed) + len(txn)
            if ring_position < 0:
                parts.append(b.data)
                size += len(b.data)
    parts[0] = _FRAME.pack(size + 1, APPEND) + _U32.pack(count)
    return parts


def decode_appends(payload: memoryview, ring: memoryview | None = None) -> list[Append]:
    """The appends of an APPEND frame; a batch in the ring is a view of `ring` (no copy)."""
    try:
        (count,) = _U32.unpack_from(payload, 0)
        pos = 4
        out: list[Append] = []
        for _ in range(count):
            append_id, topic, partition, n = _APPEND_HEAD.unpack_from(payload, pos)
            pos += _APPEND_HEAD.size
            batches = []
            for _ in range(n):
                (oc, rc, mn, mx, pid, epoch, seq, tst, txn, txn_len, data_len, ring_pos) = _BATCH.unpack_from(
                    payload, pos
                )
                pos += _BATCH.size
                txn_id = None
                if txn_len >= 0:
                    txn_id = bytes(payload[pos : pos + txn_len]).decode()
                    pos += txn_len
                # Views, not copies: the file is built from these (one join).
                if ring_pos >= 0:
                    if ring is None or ring_pos + data_len > len(ring):
                        raise WireError("a batch outside the worker's ring")
                    data = ring[ring_pos : ring_pos + data_len]
                else:
                    data = payload[pos : pos + data_len]
                    if len(data) != data_len:
                        raise WireError("append frame shorter than its batches")
                    pos += data_len
                batch = PendingBatch(data, oc, rc, mn, mx, pid, epoch, seq, tst, bool(txn), txn_id)  # type: ignore[arg-type]
                batches.append(batch)
            out.append(Append(append_id, uuid.UUID(bytes=topic), partition, tuple(batches)))
    except (struct.error, UnicodeDecodeError) as e:
        raise WireError(f"bad append frame: {e}") from None
    if pos != len(payload):
        raise WireError(f"append frame has {len(payload) - pos} bytes past its appends")
    return out


# --------------------------------------------------------------------------- writer -> worker


def encode_file(news: CommittedFileNews) -> bytes:
    key = news.object_key.encode()
    out = bytearray(_FILE_HEAD.pack(len(key)))
    out += key
    out += _F64_U32.pack(news.post_seal_estimate_s, len(news.chunks))
    for c in news.chunks:
        flags = (1 if c.plain else 0) | (2 if c.markers else 0)
        out += _CHUNK_HEAD.pack(c.topic_id.bytes, c.partition, flags, len(c.locations))
        for loc in c.locations:
            if loc.object_key != news.object_key or loc.offsets_absolute or loc.present_offsets is not None:
                raise ValueError("a committed agent file's chunk rows are plain rows of that file")
            out += _LOCATION.pack(
                loc.chunk_id,
                loc.byte_position,
                loc.byte_length,
                loc.base_offset,
                loc.last_offset,
                loc.record_count,
                loc.max_timestamp,
                _NO_TIMESTAMP if loc.min_timestamp is None else loc.min_timestamp,
            )
        out += _U32.pack(len(c.placed))
        for p in c.placed:
            out += _PLACED.pack(p.base_offset, p.byte_position, p.byte_length)
    return frame(FILE, out)


def decode_file(payload: memoryview) -> CommittedFileNews:
    try:
        (key_len,) = _FILE_HEAD.unpack_from(payload, 0)
        pos = _FILE_HEAD.size
        key = bytes(payload[pos : pos + key_len]).decode()
        pos += key_len
        estimate, n_chunks = _F64_U32.unpack_from(payload, pos)
        pos += _F64_U32.size
        chunks = []
        for _ in range(n_chunks):
            topic, partition, flags, n_loc = _CHUNK_HEAD.unpack_from(payload, pos)
            pos += _CHUNK_HEAD.size
            locations = []
            for _ in range(n_loc):
                (cid, bpos, blen, base, last, records, max_ts, min_ts) = _LOCATION.unpack_from(payload, pos)
                pos += _LOCATION.size
                locations.append(
                    ChunkLocation(
                        chunk_id=cid,
                        object_key=key,
                        byte_position=bpos,
                        byte_length=blen,
                        base_offset=base,
                        last_offset=last,
                        record_count=records,
                        max_timestamp=max_ts,
                        min_timestamp=None if min_ts == _NO_TIMESTAMP else min_ts,
                    )
                )
            (n_placed,) = _U32.unpack_from(payload, pos)
            pos += 4
            placed = []
            for _ in range(n_placed):
                placed.append(PlacedBatch(*_PLACED.unpack_from(payload, pos)))
                pos += _PLACED.size
            chunks.append(
                FileChunk(
                    uuid.UUID(bytes=topic),
                    partition,
                    bool(flags & 1),
                    bool(flags & 2),
                    tuple(locations),
                    tuple(placed),
                )
            )
    except (struct.error, UnicodeDecodeError) as e:
        raise WireError(f"bad file frame: {e}") from None
    if pos != len(payload):
        raise WireError(f"file frame has {len(payload) - pos} bytes past its chunks")
    return CommittedFileNews(key, estimate, tuple(chunks))


def encode_results(results: Iterable[tuple[int, Sequence[BatchResult]]]) -> bytes:
    out = bytearray(4)
    count = 0
    for append_id, outcomes in results:
        count += 1
        out += _RESULT_HEAD.pack(append_id, len(outcomes))
        for r in outcomes:
            message = r.error_message.encode() if r.error_message is not None else b""
            out += _OUTCOME.pack(
                r.error_code,
                r.base_offset,
                r.log_append_time_ms,
                r.log_start_offset,
                r.duplicate,
                len(message) if r.error_message is not None else -1,
            )
            out += message
    _U32.pack_into(out, 0, count)
    return frame(RESULTS, out)


def decode_results(payload: memoryview) -> list[tuple[int, list[BatchResult]]]:
    try:
        (count,) = _U32.unpack_from(payload, 0)
        pos = 4
        out = []
        for _ in range(count):
            append_id, n = _RESULT_HEAD.unpack_from(payload, pos)
            pos += _RESULT_HEAD.size
            outcomes = []
            for _ in range(n):
                code, base, append_ms, start, dup, msg_len = _OUTCOME.unpack_from(payload, pos)
                pos += _OUTCOME.size
                message = None
                if msg_len >= 0:
                    message = bytes(payload[pos : pos + msg_len]).decode()
                    pos += msg_len
                outcomes.append(BatchResult(code, base, append_ms, start, message, bool(dup)))
            out.append((append_id, outcomes))
    except (struct.error, UnicodeDecodeError) as e:
        raise WireError(f"bad results frame: {e}") from None
    if pos != len(payload):
        raise WireError(f"results frame has {len(payload) - pos} bytes past its results")
    return out


def encode_id(kind: int, ident: int) -> bytes:
    """FLUSH and FLUSHED: one u64."""
    return frame(kind, _U64.pack(ident))


def decode_id(payload: memoryview) -> int:
    if len(payload) != 8:
        raise WireError(f"id frame of {len(payload)} bytes")
    return int(_U64.unpack_from(payload, 0)[0])


def frame_header(head: bytes) -> tuple[int, int]:
    """(payload length, kind) of a frame's 5-byte head; refuses a length past the bound."""
    length, kind = _FRAME.unpack(head)
    if length < 1 or length > MAX_FRAME_BYTES:
        raise WireError(f"frame of {length} bytes (at most {MAX_FRAME_BYTES})")
    return length - 1, kind


FRAME_HEAD_BYTES = _FRAME.size
