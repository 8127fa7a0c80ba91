"""Compression codecs of Kafka record batches, with bounded decompression.

A compressed RecordBatch v2 keeps its 61-byte header in the clear and compresses the whole
run of records as one stream, in the format of the codec named by attributes bits 0-2:

- 1 gzip: an RFC 1952 gzip member (Java's GZIPOutputStream, librdkafka's zlib).
- 2 snappy: either a raw snappy block (what librdkafka and most non-Java clients send) or
  the xerial ``SnappyOutputStream`` framing Java clients send::

      magic    8 bytes   b"\\x82SNAPPY\\x00"
      version  int32 BE  1
      compat   int32 BE  1
      then blocks until the end: length int32 BE, then that many bytes of raw snappy

  Readers tell them apart by that 8-byte magic, as Java, librdkafka and kafka-python do.
- 3 lz4: an LZ4 frame (magic 0x184D2204); Kafka wants independent blocks, which is what
  `compress` writes (as Java's KafkaLZ4BlockOutputStream does). Frames with linked blocks
  decode too.
- 4 zstd: a zstd frame.

All codecs go through cramjam. Decompression is bounded: output never grows past
`max_output` bytes (default 64 MiB), whatever the input claims; a batch that would
decompress past it raises `DecompressionLimitError` having allocated at most `max_output`.
The output size is guessed from the stream where it says so (gzip ISIZE, zstd and lz4 frame
content size, snappy's length preamble) and otherwise grown by doubling.

Errors are `CodecError`, a `RecordBatchError` whose `position` is the batch's when the caller
passed it. No asyncio here.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import cramjam
from skiff.fileformat.batch_header import DEFAULT_MAX_DECOMPRESSED_BYTES, Compression, RecordBatchError

__all__ = [
    "XERIAL_BLOCK_SIZE",
    "XERIAL_MAGIC",
    "CodecError",
    "DecompressionLimitError",
    "compress",
    "decompress",
    "snappy_xerial_compress",
    "snappy_decompress",
]

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
"""Uncompressed bytes per xerial block (Java SnappyOutputStream's default)."""

_MIN_GUESS = 64 * 1024
_BUFFER_TOO_SMALL = "failed to write whole buffer"
_U32 = struct.Struct(">I")
_LE32 = struct.Struct("<I")

BytesLike = bytes | bytearray | memoryview


class CodecError(RecordBatchError):
    """Compressed records that cannot be decompressed (corrupt, truncated, unknown codec)."""


class DecompressionLimitError(CodecError):
    """The records would decompress to more than the allowed number of bytes."""


def _where(position: int | None) -> str:
    return "" if position is None else f" in record batch at byte {position}"


def _limit_error(codec: str, max_output: int, position: int | None) -> DecompressionLimitError:
    return DecompressionLimitError(
        f"{codec} records{_where(position)} decompress to more than the {max_output}-byte limit", position
    )


# ---------------------------------------------------------------------------------------------
# compression


def snappy_xerial_compress(data: BytesLike, block_size: int = XERIAL_BLOCK_SIZE) -> bytes:
    """Snappy in the xerial framing Java clients write (one raw block per `block_size` bytes)."""
    mv = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    out = bytearray(_XERIAL_HEADER)
    # at least one block, even for no data: readers that sniff for the framing (kafka-python,
    # aiokafka) want more than the 16-byte header
    for start in range(0, max(len(mv), 1), block_size):
        block = bytes(cramjam.snappy.compress_raw(mv[start : start + block_size]))
        out += _U32.pack(len(block))
        out += block
    return bytes(out)


def compress(
    codec: Compression | int, data: BytesLike, *, level: int | None = None, snappy_xerial: bool = True
) -> bytes:
    """Compress a run of encoded records for a batch of codec `codec`.

    `level` applies to gzip, lz4 and zstd (codec defaults otherwise). Snappy is written in the
    xerial framing unless `snappy_xerial` is false (then as one raw block, as librdkafka does).
    """
    codec = Compression(codec)
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec is Compression.SNAPPY:
        if snappy_xerial:
            return snappy_xerial_compress(data)
        return bytes(cramjam.snappy.compress_raw(data))
    if codec is Compression.LZ4:
        comp = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        comp.compress(data if isinstance(data, bytes) else bytes(data))
        return bytes(comp.finish())
    if codec is Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=level))
    raise CodecError(f"unsupported compression codec {codec!r}")  # pragma: no cover


# ---------------------------------------------------------------------------------------------
# decompression


def _bounded_into(
    name: str,
    decompress_into: Callable[[BytesLike, bytearray], int],
    data: BytesLike,
    guess: int,
    max_output: int,
    position: int | None,
) -> bytes:
    """Decompress into a buffer that doubles from `guess` up to `max_output` bytes."""
    size = max(1, min(max_output, guess))
    while True:
        out = bytearray(size)
        try:
            n = decompress_into(data, out)
        except Exception as exc:  # boundary: untrusted bytes; cramjam.DecompressionError and friends
            if _BUFFER_TOO_SMALL in str(exc):
                if size >= max_output:
                    raise _limit_error(name, max_output, position) from None
                size = min(max_output, size * 2)
                continue
            raise CodecError(f"corrupt {name} records{_where(position)}: {exc}", position) from None
        if n < size:
            del out[n:]
        return bytes(out)


def _gzip_guess(data: memoryview) -> int:
    # ISIZE, the last 4 bytes of a gzip member: uncompressed size mod 2**32 (a hint only).
    if len(data) >= 18:
        return _LE32.unpack_from(data, len(data) - 4)[0] or _MIN_GUESS
    return _MIN_GUESS


def _zstd_guess(data: memoryview) -> int:
    # Frame_Content_Size from the frame header, when present.
    if len(data) < 6 or bytes(data[:4]) != b"\x28\xb5\x2f\xfd":
        return max(_MIN_GUESS, 4 * len(data))
    desc = data[4]
    fcs_flag = desc >> 6
    single_segment = (desc >> 5) & 1
    dict_size = (0, 1, 2, 4)[desc & 3]
    fcs_size = (single_segment, 2, 4, 8)[fcs_flag]
    if fcs_size == 0:
        return max(_MIN_GUESS, 4 * len(data))
    at = 5 + (0 if single_segment else 1) + dict_size
    if len(data) < at + fcs_size:
        return _MIN_GUESS
    value = int.from_bytes(data[at : at + fcs_size], "little")
    if fcs_size == 2:
        value += 256
    return value or 1


def _lz4_guess(data: memoryview) -> int:
    # Content size (8 bytes LE after FLG/BD) when the FLG bit 3 says it is there.
    if len(data) >= 15 and bytes(data[:4]) == b"\x04\x22\x4d\x18" and data[4] & 0x08:
        return int.from_bytes(data[6:14], "little") or 1
    return max(_MIN_GUESS, 4 * len(data))


def _snappy_raw(data: BytesLike, max_output: int, position: int | None, total: int = 0) -> bytes:
    try:
        n = cramjam.snappy.decompress_raw_len(data)
    except Exception as exc:  # boundary: untrusted bytes, whatever cramjam raises
        raise CodecError(f"corrupt snappy records{_where(position)}: {exc}", position) from None
    if total + n > max_output:
        raise _limit_error("snappy", max_output, position)
    out = bytearray(n)
    try:
        written = cramjam.snappy.decompress_raw_into(data, out)
    except Exception as exc:  # boundary: untrusted bytes, whatever cramjam raises
        raise CodecError(f"corrupt snappy records{_where(position)}: {exc}", position) from None
    if written != n:
        raise CodecError(f"corrupt snappy records{_where(position)}: {written} bytes, expected {n}", position)
    return bytes(out)


def snappy_decompress(
    data: BytesLike, *, max_output: int = DEFAULT_MAX_DECOMPRESSED_BYTES, position: int | None = None
) -> bytes:
    """Decompress raw snappy or xerial-framed snappy (detected by the magic)."""
    mv = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    if bytes(mv[:8]) != XERIAL_MAGIC:
        return _snappy_raw(mv, max_output, position)
    if len(mv) < len(_XERIAL_HEADER):
        raise CodecError(f"corrupt snappy records{_where(position)}: truncated xerial header", position)
    parts: list[bytes] = []
    total = 0
    pos = len(_XERIAL_HEADER)
    end = len(mv)
    while pos < end:
        if end - pos < 4:
            raise CodecError(
                f"corrupt snappy records{_where(position)}: truncated xerial block length at byte {pos}",
                position,
            )
        blen = _U32.unpack_from(mv, pos)[0]
        pos += 4
        if blen > end - pos:
            raise CodecError(
                f"corrupt snappy records{_where(position)}: xerial block at byte {pos - 4} says {blen} bytes,"
                f" {end - pos} left",
                position,
            )
        part = _snappy_raw(mv[pos : pos + blen], max_output, position, total)
        total += len(part)
        parts.append(part)
        pos += blen
    return parts[0] if len(parts) == 1 else b"".join(parts)


def decompress(
    codec: Compression | int,
    data: BytesLike,
    *,
    max_output: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    position: int | None = None,
) -> bytes:
    """Decompress a batch's records; never produces (or allocates) more than `max_output` bytes.

    `position` (the batch's byte position) is only used in error messages and on the error.
    """
    try:
        codec = Compression(codec)
    except ValueError:
        raise CodecError(f"unknown compression codec id {codec}{_where(position)}", position) from None
    mv = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    if codec is Compression.NONE:
        if len(mv) > max_output:
            raise _limit_error("uncompressed", max_output, position)
        return bytes(mv)
    if codec is Compression.GZIP:
        return _bounded_into("gzip", cramjam.gzip.decompress_into, mv, _gzip_guess(mv), max_output, position)
    if codec is Compression.SNAPPY:
        return snappy_decompress(mv, max_output=max_output, position=position)
    if codec is Compression.LZ4:
        return _bounded_into("lz4", cramjam.lz4.decompress_into, mv, _lz4_guess(mv), max_output, position)
    if codec is Compression.ZSTD:
        return _bounded_into("zstd", cramjam.zstd.decompress_into, mv, _zstd_guess(mv), max_output, position)
    raise CodecError(
        f"unsupported compression codec {codec!r}{_where(position)}", position
    )  # pragma: no cover
