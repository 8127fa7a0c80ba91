"""Compression codecs: round trips, other implementations' framing, bounded decompression."""

from __future__ import annotations

import struct
import time

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from skiff.fileformat.batch_header import Compression, RecordBatchError
from skiff.fileformat.codecs import (
    XERIAL_MAGIC,
    CodecError,
    DecompressionLimitError,
    compress,
    decompress,
    snappy_decompress,
    snappy_xerial_compress,
)

ALL = list(Compression)
COMPRESSED = [c for c in Compression if c is not Compression.NONE]

payloads = st.one_of(
    st.binary(max_size=5000),
    st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=50), st.integers(1, 3000)),
)


@settings(max_examples=60, deadline=None)
@given(data=payloads, codec=st.sampled_from(ALL), xerial=st.booleans())
def test_round_trip(data: bytes, codec: Compression, xerial: bool) -> None:
    packed = compress(codec, data, snappy_xerial=xerial)
    assert decompress(codec, packed) == data
    assert decompress(int(codec), memoryview(packed)) == data
    assert decompress(codec, bytearray(packed), max_output=max(len(data), 1)) == data


@settings(max_examples=40, deadline=None)
@given(data=payloads)
def test_other_implementations_read_ours_and_we_read_theirs(data: bytes) -> None:
    from aiokafka import codec as aio

    # ours -> theirs
    assert aio.gzip_decode(compress(Compression.GZIP, data)) == data
    assert aio.snappy_decode(compress(Compression.SNAPPY, data)) == data
    assert aio.snappy_decode(compress(Compression.SNAPPY, data, snappy_xerial=False)) == data
    assert aio.lz4_decode(compress(Compression.LZ4, data)) == data
    assert aio.zstd_decode(compress(Compression.ZSTD, data)) == data
    # theirs -> ours (aiokafka writes xerial snappy with 32 KiB blocks, as Java does)
    assert decompress(Compression.GZIP, aio.gzip_encode(data)) == data
    assert decompress(Compression.SNAPPY, aio.snappy_encode(data)) == data
    assert decompress(Compression.SNAPPY, aio.snappy_encode(data, xerial_compatible=False)) == data
    assert decompress(Compression.LZ4, aio.lz4_encode(data)) == data
    assert decompress(Compression.ZSTD, aio.zstd_encode(data)) == data


def test_xerial_framing_matches_java() -> None:
    data = bytes(range(256)) * 400  # 100 KiB: four 32 KiB blocks
    packed = snappy_xerial_compress(data)
    assert packed.startswith(XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01")
    pos, blocks, out = 16, 0, b""
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        out += bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + n]))
        pos += 4 + n
        blocks += 1
    assert blocks == 4 and out == data
    assert snappy_decompress(packed) == data
    assert snappy_decompress(XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01") == b""
    assert (
        snappy_xerial_compress(b"")
        == XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01" + b"\x00\x00\x00\x01\x00"
    )


def test_lz4_frames_have_independent_blocks() -> None:
    packed = compress(Compression.LZ4, b"x" * 200_000)
    assert packed[:4] == b"\x04\x22\x4d\x18"
    flg = packed[4]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # block independence: Kafka refuses linked blocks
    assert not flg & 0x04  # no content checksum (Java's KafkaLZ4BlockOutputStream writes none)
    # frames with linked blocks (cramjam's default) and content checksums still decode
    linked = bytes(cramjam.lz4.compress(b"y" * 300_000))
    assert not linked[4] & 0x20
    assert decompress(Compression.LZ4, linked) == b"y" * 300_000


def test_output_buffer_grows_past_a_wrong_guess() -> None:
    data = bytes(range(256)) * 8000  # 2 MB, compresses ~100x: the first guess is too small
    for codec in COMPRESSED:
        assert decompress(codec, compress(codec, data), max_output=len(data)) == data
    streamed = cramjam.zstd.Compressor()
    streamed.compress(data)
    frame = bytes(streamed.finish())
    assert decompress(Compression.ZSTD, frame) == data
    # gzip's ISIZE trailer is a hint only: a lying one does not matter
    gz = bytearray(compress(Compression.GZIP, data))
    struct.pack_into("<I", gz, len(gz) - 4, 10)
    with pytest.raises(CodecError):  # cramjam checks ISIZE itself
        decompress(Compression.GZIP, bytes(gz))


@pytest.mark.parametrize("codec", COMPRESSED)
def test_bomb_is_refused_quickly(codec: Compression) -> None:
    bomb = compress(codec, b"\0" * (32 << 20))
    assert len(bomb) < 2 << 20
    start = time.monotonic()
    with pytest.raises(DecompressionLimitError, match="1048576-byte limit") as exc:
        decompress(codec, bomb, max_output=1 << 20, position=123)
    assert time.monotonic() - start < 2
    assert exc.value.position == 123
    assert isinstance(exc.value, RecordBatchError) and isinstance(exc.value, ValueError)
    # exactly at the limit is fine
    assert decompress(codec, compress(codec, b"\0" * 1000), max_output=1000) == b"\0" * 1000
    with pytest.raises(DecompressionLimitError):
        decompress(codec, compress(codec, b"\0" * 1001), max_output=1000)


def test_snappy_length_preamble_is_checked_before_allocating() -> None:
    lying = b"\xff\xff\xff\xff\x0f" + b"\x00" * 10  # claims 4 GiB
    with pytest.raises(DecompressionLimitError):
        decompress(Compression.SNAPPY, lying, max_output=1 << 20)
    # xerial: the limit applies to the sum of the blocks
    blocks = snappy_xerial_compress(b"a" * (100 << 10))
    with pytest.raises(DecompressionLimitError):
        decompress(Compression.SNAPPY, blocks, max_output=64 << 10)
    assert decompress(Compression.SNAPPY, blocks, max_output=100 << 10) == b"a" * (100 << 10)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_corrupt_and_truncated_input(codec: Compression) -> None:
    data = b"some records " * 500
    packed = compress(codec, data)
    for bad in (packed[: len(packed) // 2], b"garbage that is not compressed at all", b""):
        try:
            out = decompress(codec, bad, position=7)
        except CodecError as exc:
            assert exc.position == 7
            assert "byte 7" in str(exc)
        else:
            assert out != data  # some codecs accept some garbage; never silently the real data


def test_xerial_truncation_errors() -> None:
    packed = snappy_xerial_compress(b"hello world" * 10_000)
    with pytest.raises(CodecError, match="xerial block at byte 16"):
        snappy_decompress(packed[:30])
    with pytest.raises(CodecError, match="truncated xerial block length"):
        snappy_decompress(packed + b"\x00\x00")
    with pytest.raises(CodecError, match="truncated xerial header"):
        snappy_decompress(XERIAL_MAGIC + b"\x00\x00")


def test_unknown_codec() -> None:
    with pytest.raises(CodecError, match="unknown compression codec id 6"):
        decompress(6, b"abc", position=0)
    with pytest.raises(ValueError):
        compress(7, b"abc")


def test_none_codec_respects_limit() -> None:
    assert decompress(Compression.NONE, memoryview(b"abc")) == b"abc"
    assert compress(Compression.NONE, bytearray(b"abc")) == b"abc"
    with pytest.raises(DecompressionLimitError):
        decompress(Compression.NONE, b"abcd", max_output=3)
