"""Segment file: writer/reader round trips, streaming without footer, and corruption."""

from __future__ import annotations

import io
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from skiff.fileformat import segment as seg


class BytesRangeReader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.reads: list[tuple[int, int]] = []

    def size(self) -> int:
        return len(self.data)

    def read_range(self, start: int, length: int) -> bytes:
        self.reads.append((start, length))
        return self.data[start : start + length]


def _chunk(topic: uuid.UUID, partition: int, batches: list[bytes], **kw: object) -> seg.ChunkInput:
    return seg.ChunkInput(
        topic_id=topic,
        partition=partition,
        batches=batches,
        batch_count=len(batches),
        record_count=kw.pop("record_count", len(batches)),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


chunk_strategy = st.builds(
    lambda tid, p, batches, base, bitmap: (tid, p, batches, base, bitmap),
    st.uuids(),
    st.integers(0, 2**31 - 1),
    st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=5),
    st.integers(-1, 2**40),
    st.one_of(st.none(), st.binary(min_size=1, max_size=40)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(chunk_strategy, max_size=12, unique_by=lambda c: (c[0], c[1])), st.booleans())
def test_round_trip_footer_stream_and_ranges(chunks: list, absolute: bool) -> None:
    inputs = [
        _chunk(
            tid,
            p,
            batches,
            base_offset=base,
            last_offset=base + 7 if base >= 0 else -1,
            min_timestamp=5,
            max_timestamp=9,
            present_offsets=bitmap,
        )
        for tid, p, batches, base, bitmap in chunks
    ]
    data, placements = seg.build_segment(inputs, offsets_absolute=absolute)

    header, entries = seg.read_footer_from_bytes(data)
    assert header.offsets_absolute == absolute
    expected = sorted(inputs, key=lambda c: (c.topic_id.bytes, c.partition))
    assert [(e.topic_id, e.partition) for e in entries] == [(c.topic_id, c.partition) for c in expected]
    for e, c, p in zip(entries, expected, placements, strict=True):
        assert data[e.data_position : e.data_position + e.byte_length] == b"".join(c.batches)
        assert e.base_offset == c.base_offset and e.last_offset == c.last_offset
        assert e.present_offsets == c.present_offsets
        assert e.batch_count == len(c.batches)
        assert p.data_position == e.data_position
        for pos, b in zip(p.batch_positions, c.batches, strict=True):
            assert data[pos : pos + len(b)] == b

    # the same via ranged reads
    reader = BytesRangeReader(data)
    _, entries2 = seg.read_footer(reader)
    assert entries2 == entries

    # the stream walk needs neither footer nor metadata, and works in tiny pieces
    pieces = iter([data[i : i + 7] for i in range(0, len(data), 7)])
    walked = list(seg.iter_chunks_stream(pieces))
    assert [(h.topic_id, h.partition, d) for h, d in walked] == [
        (c.topic_id, c.partition, b"".join(c.batches)) for c in expected
    ]
    walked_file = list(seg.iter_chunks_stream(io.BytesIO(data), read_size=5))
    assert [d for _, d in walked_file] == [d for _, d in walked]


def _sample() -> bytes:
    t1, t2 = uuid.UUID(int=1), uuid.UUID(int=2)
    data, _ = seg.build_segment(
        [_chunk(t2, 0, [b"x" * 50]), _chunk(t1, 3, [b"a" * 10, b"b" * 20]), _chunk(t1, 1, [b"c" * 5])]
    )
    return data


def test_footer_small_file_read_in_two_reads_at_most() -> None:
    data = _sample()
    reader = BytesRangeReader(data)
    seg.read_footer(reader)
    assert len(reader.reads) == 1  # whole file fits the tail guess


def test_footer_large_file_needs_footer_and_header_reads() -> None:
    tid = uuid.uuid4()
    chunks = [_chunk(tid, p, [b"z" * 20_000]) for p in range(10)]
    data, _ = seg.build_segment(chunks)
    reader = BytesRangeReader(data)
    _, entries = seg.read_footer(reader)
    assert len(entries) == 10
    assert len(reader.reads) == 2  # tail (holding the footer) + header


@pytest.mark.parametrize("cut", range(0, 200, 1))
def test_every_truncation_is_an_error_naming_a_position(cut: int) -> None:
    data = _sample()
    if cut >= len(data):
        return
    truncated = data[:cut]
    with pytest.raises(seg.SegmentFormatError) as ei:
        seg.read_footer_from_bytes(truncated, name="f.seg")
    assert "f.seg: at byte" in str(ei.value)
    with pytest.raises(seg.SegmentFormatError):
        list(seg.iter_chunks_stream(iter([truncated]), name="f.seg"))


def test_every_single_byte_corruption_outside_batches_is_detected() -> None:
    data = _sample()
    _, entries = seg.read_footer_from_bytes(data)
    batch_bytes: set[int] = set()
    chunk_headers: set[int] = set()
    for e in entries:
        batch_bytes.update(range(e.data_position, e.data_position + e.byte_length))
        chunk_headers.update(range(e.header_position, e.data_position))
    for i in range(len(data)):
        if i in batch_bytes:  # batch bytes carry their own CRC, checked by the record layer
            continue
        corrupt = bytearray(data)
        corrupt[i] ^= 0x40
        # the stream walk reads every header and the footer: it must notice any flip
        with pytest.raises(seg.SegmentFormatError):
            list(seg.iter_chunks_stream(iter([bytes(corrupt)])))
        # the footer reader never reads chunk headers; everything else it must notice
        if i not in chunk_headers:
            with pytest.raises(seg.SegmentFormatError):
                seg.read_footer_from_bytes(bytes(corrupt))


def test_not_a_segment_file() -> None:
    with pytest.raises(seg.SegmentFormatError, match="not a Skiff segment file"):
        seg.read_footer_from_bytes(b"PK\x03\x04" + b"\0" * 100, name="zip")


def test_writer_refuses_unsorted_chunks() -> None:
    w = seg.SegmentWriter(io.BytesIO())
    w.add_chunk(_chunk(uuid.UUID(int=5), 1, [b"a"]))
    with pytest.raises(ValueError):
        w.add_chunk(_chunk(uuid.UUID(int=5), 0, [b"a"]))


def test_absurd_footer_length_refused_without_allocation() -> None:
    data = bytearray(_sample())
    trailer = len(data) - seg.TRAILER_SIZE
    data[trailer + 8 : trailer + 12] = (2**31).to_bytes(4, "big")
    with pytest.raises(seg.SegmentFormatError, match="exceeds limit"):
        seg.read_footer_from_bytes(bytes(data))
