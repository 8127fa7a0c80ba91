"""Kafka's variable-length integers: the one owner of the rule in Skiff.

Unsigned varint (LEB128, Kafka's `ByteUtils.readUnsignedVarint`): seven bits a byte, least
significant group first, the high bit set on every byte but the last. The protocol's compact
lengths and tagged fields use it (at most 5 bytes, `MAX_VARINT_BYTES`).

Signed varint and varlong (Kafka's `readVarint` / `readVarlong`, protobuf's sint32/sint64):
the value is zigzag-mapped first, ``z = (v << 1) ^ (v >> 63)`` (0, -1, 1, -2, ... become 0,
1, 2, 3, ...), so small negative numbers stay short, and ``z`` is written as an unsigned
varint. Record fields are varints (at most 5 bytes) except timestampDelta, a varlong (at
most 10 bytes, `MAX_VARLONG_BYTES`). For values that fit in 32 bits the 32- and 64-bit
zigzag maps agree, so one encoder serves both.

Readers take the buffer and a position and return (value, next position). They raise
`VarintTooLongError` (a ValueError) when no terminating byte comes within `max_bytes`, and
`TruncatedVarintError` (both a ValueError and an IndexError, so a record walk that catches
IndexError for "ran past the end" keeps working) when the buffer (or `end`) ends first.

Hot loops (`fileformat.record_decode`, `fileformat.log_validator`, the protocol's produce
request reader) read the one-byte form, and where lengths of 64 bytes and more are common the
two-byte form, inline (``v = data[pos]; if v < 0x80: pos += 1``: a call costs more than the
read) and call `read_uvarint` for the rest; tests/unit/test_varint.py walks records through
every length form against this module. The compiled kernels (`spark.decode_kernels`, NumPy in `compactor.record_scan`) keep their own
code and are tested against this module (tests/unit/test_varint.py).

No asyncio here; nothing else from the project is imported.
"""

from __future__ import annotations

__all__ = [
    "MAX_VARINT_BYTES",
    "MAX_VARLONG_BYTES",
    "TruncatedVarintError",
    "VarintError",
    "VarintTooLongError",
    "encode_uvarint",
    "encode_varint",
    "read_uvarint",
    "read_varint",
    "read_varlong",
    "unzigzag",
    "uvarint_size",
    "varint_size",
    "write_uvarint",
    "write_varint",
    "zigzag",
]

MAX_VARINT_BYTES = 5
"""An int32 (zigzag or unsigned) takes at most 5 bytes."""
MAX_VARLONG_BYTES = 10
"""An int64 takes at most 10 bytes."""

Buffer = bytes | bytearray | memoryview

_SMALL = [bytes([i]) for i in range(128)]


class VarintError(ValueError):
    """Bytes that are not a varint of the allowed length."""


class VarintTooLongError(VarintError):
    """No terminating byte within the allowed number of bytes."""


class TruncatedVarintError(VarintError, IndexError):
    """The buffer ends inside a varint."""


def zigzag(v: int) -> int:
    """The zigzag map of a signed 64-bit value: 0, -1, 1, -2 ... to 0, 1, 2, 3 ..."""
    return (v << 1) ^ (v >> 63)


def unzigzag(z: int) -> int:
    """The inverse of `zigzag`."""
    return (z >> 1) ^ -(z & 1)


def read_uvarint(
    buf: Buffer, pos: int, max_bytes: int = MAX_VARINT_BYTES, end: int | None = None
) -> tuple[int, int]:
    """The unsigned varint at `pos` (at most `max_bytes` bytes, before `end`): (value, next position)."""
    if end is None:
        end = len(buf)
    result = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise TruncatedVarintError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise VarintTooLongError(f"varint longer than {max_bytes} bytes")


def read_varint(
    buf: Buffer, pos: int, max_bytes: int = MAX_VARINT_BYTES, end: int | None = None
) -> tuple[int, int]:
    """The signed (zigzag) varint at `pos`: (value, next position)."""
    z, pos = read_uvarint(buf, pos, max_bytes, end)
    return (z >> 1) ^ -(z & 1), pos


def read_varlong(buf: Buffer, pos: int, end: int | None = None) -> tuple[int, int]:
    """The signed (zigzag) varlong at `pos` (at most 10 bytes): (value, next position)."""
    return read_varint(buf, pos, MAX_VARLONG_BYTES, end)


def encode_uvarint(z: int) -> bytes:
    """The unsigned varint of `z` >= 0."""
    if z < 0x80:
        return _SMALL[z]
    out = bytearray()
    write_uvarint(out, z)
    return bytes(out)


def write_uvarint(out: bytearray, z: int) -> None:
    """Append the unsigned varint of `z` >= 0 to `out`."""
    if z < 0:
        raise ValueError(f"an unsigned varint cannot hold {z}")
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def encode_varint(v: int) -> bytes:
    """The signed (zigzag) varint or varlong of `v`, a signed 64-bit value."""
    return encode_uvarint((v << 1) ^ (v >> 63))


def write_varint(out: bytearray, v: int) -> None:
    """Append the signed (zigzag) varint or varlong of `v` to `out`."""
    write_uvarint(out, (v << 1) ^ (v >> 63))


def uvarint_size(z: int) -> int:
    """Bytes the unsigned varint of `z` >= 0 takes."""
    return max(1, (z.bit_length() + 6) // 7)


def varint_size(v: int) -> int:
    """Bytes the signed (zigzag) varint or varlong of `v` takes."""
    return uvarint_size((v << 1) ^ (v >> 63))
