"""The multi-partition segment file: writer, streaming reader, footer reader.

One file holds many partitions' RecordBatches. The byte-level spec is
`docs/file-format.md`; in short (all integers big-endian, as in Kafka):

    file    := header chunk* footer trailer
    header  := "SKIFFSEG" version:u16 flags:u16 header_crc:u32                  (16 bytes)
    chunk   := chunk_header batches
    chunk_header := "CHNK" topic_id:16 partition:i32 byte_length:u32 batch_count:u32
                    record_count:u32 base_offset:i64 header_crc:u32              (48 bytes)
    footer  := "FOOT" entry_count:u32 entry*
    entry   := topic_id:16 partition:i32 header_position:u64 data_position:u64
               byte_length:u32 batch_count:u32 record_count:u32 base_offset:i64
               last_offset:i64 min_timestamp:i64 max_timestamp:i64 bitmap_length:u32
               bitmap:bitmap_length                                              (84 + bitmap)
    trailer := footer_position:u64 footer_length:u32 footer_crc:u32 "SKIFFEND"  (24 bytes)

Chunks are sorted by (topic_id bytes, partition) and each holds one partition's
RecordBatches verbatim. Because each chunk carries its own header, one sequential
stream from byte 0 walks the whole file with neither footer nor metadata (what lets the
compactor run two independent streams over a file with one GET each); the footer lets
any reader find a chunk with two small ranged reads. `base_offset`/`last_offset` are -1
in agent-written files (metadata assigns offsets after the PUT) and absolute in
compactor output (header flag `FLAG_OFFSETS_ABSOLUTE`).

Every inconsistency raises `SegmentFormatError` naming the file and the byte position;
a reader never returns a guess.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO, Protocol

import crc32c

FILE_MAGIC = b"SKIFFSEG"
TRAILER_MAGIC = b"SKIFFEND"
CHUNK_MAGIC = b"CHNK"
FOOTER_MAGIC = b"FOOT"
FORMAT_VERSION = 1
FLAG_OFFSETS_ABSOLUTE = 0x1

_HEADER = struct.Struct(">8sHHI")
_CHUNK_HEADER_BODY = struct.Struct(">4s16siIIIq")
_CHUNK_HEADER = struct.Struct(">4s16siIIIqI")
_FOOTER_HEAD = struct.Struct(">4sI")
_ENTRY = struct.Struct(">16siQQIIIqqqqI")
_TRAILER = struct.Struct(">QII8s")

HEADER_SIZE = _HEADER.size  # 16
CHUNK_HEADER_SIZE = _CHUNK_HEADER.size  # 48
TRAILER_SIZE = _TRAILER.size  # 24
ENTRY_FIXED_SIZE = _ENTRY.size  # 84

# A footer larger than this is refused rather than allocated (a corrupt trailer must not
# make a reader allocate gigabytes). 64 MiB is ~600k chunks, far above any real file.
MAX_FOOTER_BYTES = 64 * 1024 * 1024
# A single chunk may not exceed this (4 GiB - 1 is the u32 limit anyway).
MAX_CHUNK_BYTES = 0xFFFF_FFFF


class SegmentFormatError(ValueError):
    """The bytes are not a valid segment file; names the file and the byte position."""

    def __init__(self, name: str, position: int, message: str) -> None:
        super().__init__(f"{name}: at byte {position}: {message}")
        self.name = name
        self.position = position


@dataclass(frozen=True)
class FileHeader:
    version: int
    flags: int

    @property
    def offsets_absolute(self) -> bool:
        return bool(self.flags & FLAG_OFFSETS_ABSOLUTE)


@dataclass(frozen=True)
class ChunkHeader:
    topic_id: uuid.UUID
    partition: int
    byte_length: int
    batch_count: int
    record_count: int
    base_offset: int
    header_position: int  # where the chunk header starts in the file

    @property
    def data_position(self) -> int:
        return self.header_position + CHUNK_HEADER_SIZE


@dataclass(frozen=True)
class FooterEntry:
    topic_id: uuid.UUID
    partition: int
    header_position: int
    data_position: int
    byte_length: int
    batch_count: int
    record_count: int
    base_offset: int  # -1 when unknown (agent files)
    last_offset: int  # -1 when unknown
    min_timestamp: int
    max_timestamp: int
    present_offsets: bytes | None  # serialized roaring bitmap, compacted chunks only


@dataclass(frozen=True)
class ChunkInput:
    """What a writer needs to know about one partition's batches."""

    topic_id: uuid.UUID
    partition: int
    batches: Sequence[bytes | bytearray | memoryview]
    batch_count: int
    record_count: int
    min_timestamp: int = -1
    max_timestamp: int = -1
    base_offset: int = -1
    last_offset: int = -1
    present_offsets: bytes | None = None


@dataclass(frozen=True)
class ChunkPlacement:
    """Where the writer put a chunk and each of its batches."""

    topic_id: uuid.UUID
    partition: int
    header_position: int
    data_position: int
    byte_length: int
    batch_positions: tuple[int, ...]  # absolute file position of each batch


def _sort_key(topic_id: uuid.UUID, partition: int) -> tuple[bytes, int]:
    return (topic_id.bytes, partition)


class SegmentWriter:
    """Writes a segment file to a binary stream; chunks must arrive in sorted order.

    Use `build_segment` when the chunks are all in memory in any order.
    """

    def __init__(self, out: BinaryIO, *, offsets_absolute: bool = False) -> None:
        self._out = out
        self._position = 0
        self._entries: list[FooterEntry] = []
        self._last_key: tuple[bytes, int] | None = None
        self._finished = False
        flags = FLAG_OFFSETS_ABSOLUTE if offsets_absolute else 0
        head = _HEADER.pack(FILE_MAGIC, FORMAT_VERSION, flags, 0)[:12]
        self._write(head + struct.pack(">I", crc32c.crc32c(head)))

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        self._out.write(data)
        self._position += len(data)

    @property
    def position(self) -> int:
        return self._position

    def add_chunk(self, chunk: ChunkInput) -> ChunkPlacement:
        if chunk.batch_count != len(chunk.batches):
            raise ValueError("batch_count does not match the batches given")
        byte_length = sum(len(b) for b in chunk.batches)
        return self._add(chunk, byte_length, chunk.batches, track_batches=True)

    def add_chunk_bytes(
        self, chunk: ChunkInput, byte_length: int, pieces: Iterable[bytes | bytearray | memoryview]
    ) -> ChunkPlacement:
        """As `add_chunk`, for a chunk whose batches arrive as `pieces` of any size (read
        back from a spool file, say) adding up to `byte_length`; `chunk.batches` is not
        read, and the placement has no batch positions."""
        return self._add(chunk, byte_length, pieces, track_batches=False)

    def _add(
        self,
        chunk: ChunkInput,
        byte_length: int,
        pieces: Iterable[bytes | bytearray | memoryview],
        *,
        track_batches: bool,
    ) -> ChunkPlacement:
        if self._finished:
            raise RuntimeError("segment already finished")
        key = _sort_key(chunk.topic_id, chunk.partition)
        if self._last_key is not None and key <= self._last_key:
            raise ValueError(
                f"chunks must be added in (topic_id, partition) order, got {key} after {self._last_key}"
            )
        self._last_key = key
        if byte_length > MAX_CHUNK_BYTES:
            raise ValueError(f"chunk of {byte_length} bytes exceeds the format limit")
        header_position = self._position
        body = _CHUNK_HEADER_BODY.pack(
            CHUNK_MAGIC,
            chunk.topic_id.bytes,
            chunk.partition,
            byte_length,
            chunk.batch_count,
            chunk.record_count,
            chunk.base_offset,
        )
        self._write(body + struct.pack(">I", crc32c.crc32c(body)))
        data_position = self._position
        batch_positions = []
        for piece in pieces:
            if track_batches:
                batch_positions.append(self._position)
            self._write(piece)
        if self._position - data_position != byte_length:
            raise ValueError(f"chunk pieces hold {self._position - data_position} bytes, not {byte_length}")
        self._entries.append(
            FooterEntry(
                topic_id=chunk.topic_id,
                partition=chunk.partition,
                header_position=header_position,
                data_position=data_position,
                byte_length=byte_length,
                batch_count=chunk.batch_count,
                record_count=chunk.record_count,
                base_offset=chunk.base_offset,
                last_offset=chunk.last_offset,
                min_timestamp=chunk.min_timestamp,
                max_timestamp=chunk.max_timestamp,
                present_offsets=chunk.present_offsets,
            )
        )
        return ChunkPlacement(
            chunk.topic_id,
            chunk.partition,
            header_position,
            data_position,
            byte_length,
            tuple(batch_positions),
        )

    def finish(self) -> int:
        """Write footer and trailer; returns the file size."""
        if self._finished:
            raise RuntimeError("segment already finished")
        self._finished = True
        footer = encode_footer(self._entries)
        footer_position = self._position
        self._write(footer)
        self._write(_TRAILER.pack(footer_position, len(footer), crc32c.crc32c(footer), TRAILER_MAGIC))
        return self._position


def encode_footer(entries: Sequence[FooterEntry]) -> bytes:
    parts = [_FOOTER_HEAD.pack(FOOTER_MAGIC, len(entries))]
    for e in entries:
        bitmap = e.present_offsets or b""
        parts.append(
            _ENTRY.pack(
                e.topic_id.bytes,
                e.partition,
                e.header_position,
                e.data_position,
                e.byte_length,
                e.batch_count,
                e.record_count,
                e.base_offset,
                e.last_offset,
                e.min_timestamp,
                e.max_timestamp,
                len(bitmap),
            )
        )
        parts.append(bitmap)
    return b"".join(parts)


def build_segment(
    chunks: Sequence[ChunkInput], *, offsets_absolute: bool = False
) -> tuple[bytes, list[ChunkPlacement]]:
    """Build a whole segment file in memory; chunks may come in any order.

    The pieces are collected and joined once at the end: growing a BytesIO chunk by chunk
    re-copies the file many times over, on the event loop's hot path.
    """
    parts = _PartsSink()
    writer = SegmentWriter(parts, offsets_absolute=offsets_absolute)  # type: ignore[arg-type]
    placements = [
        writer.add_chunk(c) for c in sorted(chunks, key=lambda c: _sort_key(c.topic_id, c.partition))
    ]
    writer.finish()
    return b"".join(parts.parts), placements


class _PartsSink:
    """A write-only sink that keeps references to the pieces (no copy until the final join)."""

    def __init__(self) -> None:
        self.parts: list[bytes | bytearray | memoryview] = []

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self.parts.append(data)
        return len(data)


# ---------------------------------------------------------------------------- reading


def parse_file_header(data: bytes | memoryview, name: str = "<segment>") -> FileHeader:
    if len(data) < HEADER_SIZE:
        raise SegmentFormatError(name, len(data), f"file header needs {HEADER_SIZE} bytes, got {len(data)}")
    magic, version, flags, header_crc = _HEADER.unpack_from(data, 0)
    if magic != FILE_MAGIC:
        raise SegmentFormatError(name, 0, f"not a Skiff segment file (magic {bytes(magic)!r})")
    if crc32c.crc32c(bytes(data[:12])) != header_crc:
        raise SegmentFormatError(name, 12, "file header CRC-32C mismatch")
    if version != FORMAT_VERSION:
        raise SegmentFormatError(name, 8, f"unsupported segment format version {version}")
    return FileHeader(version=version, flags=flags)


def parse_trailer(data: bytes | memoryview, file_size: int, name: str = "<segment>") -> tuple[int, int, int]:
    """Parse the last TRAILER_SIZE bytes; returns (footer_position, footer_length, footer_crc)."""
    trailer_position = file_size - TRAILER_SIZE
    if file_size < HEADER_SIZE + TRAILER_SIZE or len(data) < TRAILER_SIZE:
        raise SegmentFormatError(name, max(trailer_position, 0), "file too short to hold a trailer")
    footer_position, footer_length, footer_crc, magic = _TRAILER.unpack_from(data, len(data) - TRAILER_SIZE)
    if magic != TRAILER_MAGIC:
        raise SegmentFormatError(
            name, trailer_position + 16, "trailer magic missing: file truncated or corrupt"
        )
    if footer_length > MAX_FOOTER_BYTES:
        raise SegmentFormatError(name, trailer_position + 8, f"footer length {footer_length} exceeds limit")
    if footer_position < HEADER_SIZE or footer_position + footer_length != trailer_position:
        raise SegmentFormatError(
            name, trailer_position, f"footer at {footer_position}+{footer_length} does not end at the trailer"
        )
    return footer_position, footer_length, footer_crc


def parse_footer(
    footer: bytes | memoryview, footer_position: int, footer_crc: int, name: str = "<segment>"
) -> list[FooterEntry]:
    if crc32c.crc32c(footer) != footer_crc:
        raise SegmentFormatError(name, footer_position, "footer CRC-32C mismatch")
    view = memoryview(footer)
    if len(view) < _FOOTER_HEAD.size:
        raise SegmentFormatError(name, footer_position, "footer too short")
    magic, count = _FOOTER_HEAD.unpack_from(view, 0)
    if magic != FOOTER_MAGIC:
        raise SegmentFormatError(name, footer_position, "footer magic missing")
    pos = _FOOTER_HEAD.size
    entries: list[FooterEntry] = []
    for _ in range(count):
        if pos + ENTRY_FIXED_SIZE > len(view):
            raise SegmentFormatError(name, footer_position + pos, "footer entry truncated")
        (tid, partition, hpos, dpos, blen, bcount, rcount, base, last, mints, maxts, bmlen) = (
            _ENTRY.unpack_from(view, pos)
        )
        pos += ENTRY_FIXED_SIZE
        if pos + bmlen > len(view):
            raise SegmentFormatError(name, footer_position + pos, "footer bitmap truncated")
        bitmap = bytes(view[pos : pos + bmlen]) if bmlen else None
        pos += bmlen
        if dpos != hpos + CHUNK_HEADER_SIZE or dpos + blen > footer_position:
            raise SegmentFormatError(
                name, footer_position + pos, "footer entry points outside the chunk area"
            )
        entries.append(
            FooterEntry(
                uuid.UUID(bytes=bytes(tid)),
                partition,
                hpos,
                dpos,
                blen,
                bcount,
                rcount,
                base,
                last,
                mints,
                maxts,
                bitmap,
            )
        )
    if pos != len(view):
        raise SegmentFormatError(name, footer_position + pos, "trailing bytes after the footer entries")
    return entries


def read_footer_from_bytes(
    data: bytes | memoryview, name: str = "<segment>"
) -> tuple[FileHeader, list[FooterEntry]]:
    """Footer of a whole file held in memory."""
    header = parse_file_header(data, name)
    footer_position, footer_length, footer_crc = parse_trailer(data, len(data), name)
    view = memoryview(data)
    return header, parse_footer(
        view[footer_position : footer_position + footer_length], footer_position, footer_crc, name
    )


class RangeReader(Protocol):
    """What `read_footer` needs: the object's size and ranged reads (a sync store works)."""

    def size(self) -> int: ...
    def read_range(self, start: int, length: int) -> bytes: ...


# Reading this many bytes from the end first usually captures trailer and footer in one GET.
TAIL_GUESS_BYTES = 64 * 1024


def read_footer(reader: RangeReader, name: str = "<segment>") -> tuple[FileHeader, list[FooterEntry]]:
    """Footer via ranged reads: the tail (one read, usually holding the whole footer), then
    the rest of the footer if it was larger, then the 16-byte header."""
    size = reader.size()
    if size < HEADER_SIZE + TRAILER_SIZE:
        raise SegmentFormatError(name, size, "file too short to be a segment file")
    tail_len = min(size, TAIL_GUESS_BYTES)
    tail = reader.read_range(size - tail_len, tail_len)
    footer_position, footer_length, footer_crc = parse_trailer(tail, size, name)
    tail_start = size - tail_len
    if footer_position >= tail_start:
        footer = memoryview(tail)[footer_position - tail_start : footer_position - tail_start + footer_length]
    else:
        footer = memoryview(reader.read_range(footer_position, footer_length))
    header_bytes = tail[:HEADER_SIZE] if tail_start == 0 else reader.read_range(0, HEADER_SIZE)
    header = parse_file_header(header_bytes, name)
    return header, parse_footer(footer, footer_position, footer_crc, name)


def _parse_chunk_header(raw: bytes, position: int, name: str) -> ChunkHeader:
    magic, tid, partition, blen, bcount, rcount, base, crc = _CHUNK_HEADER.unpack(raw)
    if magic != CHUNK_MAGIC:
        raise SegmentFormatError(name, position, f"expected a chunk header, found {bytes(magic)!r}")
    if crc32c.crc32c(raw[: _CHUNK_HEADER_BODY.size]) != crc:
        raise SegmentFormatError(name, position, "chunk header CRC-32C mismatch")
    return ChunkHeader(uuid.UUID(bytes=tid), partition, blen, bcount, rcount, base, position)


class _Stream:
    """Exact reads over an iterator of byte chunks (a streaming GET body)."""

    def __init__(self, chunks: Iterator[bytes], name: str) -> None:
        self._chunks = chunks
        self._buf = bytearray()
        self._pos = 0  # file position of _buf[0]
        self.name = name

    @property
    def position(self) -> int:
        return self._pos

    def read_exact(self, n: int, what: str) -> bytes:
        if len(self._buf) >= n:
            out = bytes(self._buf[:n])
            del self._buf[:n]
            self._pos += n
            return out
        return bytes(self.read_chunk(n, what))

    def read_chunk(self, n: int, what: str) -> bytearray:
        """`n` bytes as a bytearray (see below: no intermediate copies)."""
        if len(self._buf) >= n:
            small = self._buf[:n]
            del self._buf[:n]
            self._pos += n
            return small
        # A long read (a whole chunk, up to hundreds of MiB in a compacted file) is copied
        # piece by piece into a buffer of its final size: growing `_buf` and copying a
        # slice of it out would hold about three times the chunk at the peak, joining the
        # pieces twice; this holds the chunk and one piece.
        out = bytearray(n)
        have = len(self._buf)
        out[:have] = self._buf
        view = memoryview(out)
        while have < n:
            try:
                piece = next(self._chunks)
            except StopIteration:
                raise SegmentFormatError(
                    self.name, self._pos + have, f"file truncated while reading {what} ({n} bytes)"
                ) from None
            take = min(len(piece), n - have)
            view[have : have + take] = piece[:take] if take < len(piece) else piece
            have += take
            if take < len(piece):
                self._buf = bytearray(piece[take:])
                break
        else:
            self._buf = bytearray()
        view.release()
        self._pos += n
        return out

    def read_rest(self, max_bytes: int) -> bytes:
        """Everything left (footer and trailer); refuses more than max_bytes."""
        for piece in self._chunks:
            self._buf += piece
            if len(self._buf) > max_bytes:
                raise SegmentFormatError(self.name, self._pos + len(self._buf), "footer too large")
        out = bytes(self._buf)
        self._pos += len(out)
        self._buf.clear()
        return out


def iter_chunks_stream(
    chunks: Iterator[bytes] | BinaryIO, name: str = "<segment>", *, read_size: int = 1 << 20
) -> Iterator[tuple[ChunkHeader, bytearray]]:
    """Walk a segment from byte 0 using only chunk headers: yields (header, batch bytes).

    Accepts an iterator of byte pieces (a streaming GET) or a binary file object. Stops at
    the footer, which it verifies is followed by a well-formed trailer; neither footer
    contents nor metadata are needed.
    """
    if hasattr(chunks, "read"):
        f = chunks

        def pieces() -> Iterator[bytes]:
            while True:
                b = f.read(read_size)
                if not b:
                    return
                yield b

        it: Iterator[bytes] = pieces()
    else:
        it = iter(chunks)
    stream = _Stream(it, name)
    parse_file_header(stream.read_exact(HEADER_SIZE, "the file header"), name)
    last_key: tuple[bytes, int] | None = None
    while True:
        position = stream.position
        magic = stream.read_exact(4, "a chunk or footer marker")
        if magic == FOOTER_MAGIC:
            (count,) = struct.unpack(">I", stream.read_exact(4, "the footer entry count"))
            rest = stream.read_rest(MAX_FOOTER_BYTES + TRAILER_SIZE)
            footer = FOOTER_MAGIC + struct.pack(">I", count) + bytes(rest[:-TRAILER_SIZE])
            if len(rest) < TRAILER_SIZE:
                raise SegmentFormatError(name, stream.position, "file truncated: no trailer")
            file_size = stream.position
            footer_position, _length, footer_crc = parse_trailer(bytes(rest[-TRAILER_SIZE:]), file_size, name)
            if footer_position != position:
                raise SegmentFormatError(
                    name, position, f"trailer points at footer {footer_position}, found at {position}"
                )
            parse_footer(footer, footer_position, footer_crc, name)
            return
        raw = magic + stream.read_exact(CHUNK_HEADER_SIZE - 4, "a chunk header")
        header = _parse_chunk_header(raw, position, name)
        key = _sort_key(header.topic_id, header.partition)
        if last_key is not None and key <= last_key:
            raise SegmentFormatError(name, position, "chunks out of (topic_id, partition) order")
        last_key = key
        # not bound to a local: a suspended generator would keep the chunk alive until the
        # caller asks for the next one (the compactor keeps two streams per input file open)
        yield header, stream.read_chunk(header.byte_length, f"chunk data of {header.byte_length} bytes")


def read_chunk_header_at(data: bytes | memoryview, position: int, name: str = "<segment>") -> ChunkHeader:
    if position + CHUNK_HEADER_SIZE > len(data):
        raise SegmentFormatError(name, position, "chunk header truncated")
    return _parse_chunk_header(bytes(data[position : position + CHUNK_HEADER_SIZE]), position, name)
