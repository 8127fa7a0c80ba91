"""RecordBatch v2: real-client fixtures, cross-checks against kafka-python and aiokafka,
round trips, corruption, and re-offsetting."""

from __future__ import annotations

import importlib.util
import json
import struct
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from skiff.fileformat.batch_header import (
    BATCH_HEADER_SIZE,
    DEFAULT_MAX_BATCH_BYTES,
    BatchHeader,
    Compression,
    CorruptBatchError,
    RecordBatchError,
    TimestampType,
    TruncatedBatchError,
    UnsupportedMagicError,
    iter_assigned_offsets,
    iter_batches,
    parse_header,
    patch_base_offset,
    patch_base_offsets,
)
from skiff.fileformat.record_build import build_batch, build_control_batch
from skiff.fileformat.record_decode import (
    ControlRecordType,
    Record,
    decode_records,
    iter_records,
    parse_control_record,
    summarize_batches,
    validate_batch,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BATCHES = FIXTURES / "batches"


def _load_capture_module() -> Any:
    spec = importlib.util.spec_from_file_location("capture_batches", FIXTURES / "capture_batches.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("capture_batches", module)
    spec.loader.exec_module(module)
    return module


capture = _load_capture_module()
INDEX = json.loads((BATCHES / "index.json").read_text())
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _records_tuple(recs: list[Record]) -> list[tuple[Any, ...]]:
    return [(r.offset_delta, r.timestamp, r.key, r.value, list(r.headers)) for r in recs]


# ---------------------------------------------------------------------------------------------
# fixtures recorded from real clients


def test_fixture_index_covers_every_client_and_codec() -> None:
    seen = {(t["client"], t["codec"]) for t in INDEX["topics"].values()}
    for codec in CODEC_IDS:
        assert ("confluent-kafka", codec) in seen
        assert ("aiokafka", codec) in seen
    assert ("kafka-python", "none") in seen and ("kafka-python", "gzip") in seen
    files = sorted(p.name for p in BATCHES.glob("*.bin"))
    assert files == sorted(f["file"] for f in INDEX["files"])
    assert sum(p.stat().st_size for p in BATCHES.iterdir()) < 200 * 1024


@pytest.mark.parametrize("topic", sorted(INDEX["topics"]))
def test_fixture_decodes_to_what_was_sent(topic: str) -> None:
    meta = INDEX["topics"][topic]
    sent = [
        capture.Message(**{**m, "headers": [tuple(h) for h in m["headers"]]})
        for m in INDEX["message_sets"][meta["messages"]]
    ]
    expected: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for m in sent:
        expected[m.partition].append((m.timestamp, m.key_bytes, m.value_bytes, m.header_bytes))
    files = sorted((f for f in INDEX["files"] if f["topic"] == topic), key=lambda f: f["seq"])
    assert files, topic
    got: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for f in files:
        data = (BATCHES / f["file"]).read_bytes()
        assert f["size"] == len(data)
        summary = summarize_batches(data)
        count = 0
        for pos, header in iter_batches(memoryview(data)):
            assert validate_batch(data, pos, decode=True, contiguous=True) == header
            assert header.magic == 2
            assert header.compression == CODEC_IDS[meta["codec"]], f"{f['file']} batch at {pos}"
            assert header.timestamp_type is TimestampType.CREATE_TIME
            assert not header.is_control and not header.is_transactional
            recs = decode_records(data, pos)
            assert [r.offset_delta for r in recs] == list(range(header.records_count))
            assert header.max_timestamp == max(r.timestamp for r in recs)
            if meta["config"].get("enable.idempotence"):
                assert (header.producer_id, header.producer_epoch) == (4242, 0)
                assert header.base_sequence >= 0
            else:
                assert header.producer_id == -1
            count += header.records_count
            got[f["partition"]].extend((r.timestamp, r.key, r.value, list(r.headers)) for r in recs)
        assert summary.record_count == count == summary.offset_count
    assert dict(got) == dict(expected)


def test_fixture_snappy_framings() -> None:
    """librdkafka sends raw snappy; kafka-python and aiokafka (like Java) the xerial framing."""
    for f in INDEX["files"]:
        if f["codec"] != "snappy":
            continue
        data = (BATCHES / f["file"]).read_bytes()
        xerial = data[BATCH_HEADER_SIZE : BATCH_HEADER_SIZE + 8] == b"\x82SNAPPY\x00"
        assert xerial == (f["client"] != "confluent-kafka"), f["file"]
    # the big xerial fixtures span several 32 KiB blocks
    big = (BATCHES / next(f["file"] for f in INDEX["files"] if f["topic"] == "aio.snappy.big")).read_bytes()
    body = big[BATCH_HEADER_SIZE + 16 :]
    blocks = 0
    while body:
        (n,) = struct.unpack_from(">i", body)
        body = body[4 + n :]
        blocks += 1
    assert blocks >= 2


def test_fixture_batches_can_be_reoffset_in_place() -> None:
    data = bytearray(
        (BATCHES / "ck.none.p0.00.bin").read_bytes() + (BATCHES / "ck.gzip.p0.00.bin").read_bytes()
    )
    plan = list(iter_assigned_offsets(data, 1000))
    nxt = patch_base_offsets(data, 1000)
    for pos, _header, assigned in plan:
        assert parse_header(data, pos).base_offset == assigned
        validate_batch(data, pos)
    assert plan[0][2] == 1000
    assert plan[1][2] == 1000 + plan[0][1].last_offset_delta + 1
    assert nxt == plan[1][2] + plan[1][1].last_offset_delta + 1


# ---------------------------------------------------------------------------------------------
# Hypothesis: our codec against kafka-python's and aiokafka's


header_keys = st.text(max_size=12)
blobs = st.binary(max_size=200)
headers_st = st.lists(st.tuples(header_keys, st.none() | blobs), max_size=4)


@st.composite
def record_lists(draw: st.DrawFn, min_size: int = 1, max_size: int = 25) -> list[Record]:
    deltas = sorted(draw(st.sets(st.integers(0, 2**31 - 1), min_size=min_size, max_size=max_size)))
    if draw(st.booleans()):  # contiguous, as producers send
        deltas = list(range(len(deltas)))
    base_ts = draw(st.integers(0, 2**45))
    out = []
    for d in deltas:
        ts = base_ts + draw(st.integers(-(10**6), 10**9))
        key = draw(st.none() | blobs)
        value = draw(st.none() | st.binary(max_size=600))
        out.append(Record(d, max(ts, 0), key, value, draw(headers_st)))
    return out


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _kafka_python_build(records: list[Record], codec: int) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for r in records:
        assert builder.append(r.offset_delta, r.timestamp, r.key, r.value, list(r.headers)) is not None
    return bytes(builder.build())


def _aiokafka_build(records: list[Record], codec: int, pid: int, epoch: int, seq: int) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(2, codec, 0, pid, epoch, seq, 1 << 30)
    for r in records:
        assert builder.append(r.offset_delta, r.timestamp, r.key, r.value, list(r.headers)) is not None
    return bytes(builder.build())


@SETTINGS
@given(records=record_lists(), codec=st.sampled_from([0, 1]))
def test_kafka_python_built_batches_decode(records: list[Record], codec: int) -> None:
    data = _kafka_python_build(records, codec)
    header = validate_batch(data, decode=True)
    assert header.records_count == len(records)
    assert header.last_offset_delta == records[-1].offset_delta
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert _records_tuple(decode_records(data)) == _records_tuple(records)


@SETTINGS
@given(
    records=record_lists(),
    codec=st.sampled_from([0, 1, 2, 3, 4]),
    producer=st.sampled_from([(-1, -1, -1), (7, 3, 100)]),
)
def test_aiokafka_built_batches_decode(
    records: list[Record], codec: int, producer: tuple[int, int, int]
) -> None:
    data = _aiokafka_build(records, codec, *producer)
    header = validate_batch(data, decode=True)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == producer
    assert _records_tuple(decode_records(data)) == _records_tuple(records)


@SETTINGS
@given(records=record_lists(), codec=st.sampled_from([0, 1]), base=st.integers(0, 2**40))
def test_our_batches_decode_in_kafka_python(records: list[Record], codec: int, base: int) -> None:
    from kafka.record.default_records import DefaultRecordBatch

    data = build_batch(
        records, base_offset=base, compression=codec, producer_id=5, producer_epoch=1, base_sequence=9
    )
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    assert batch.compression_type == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (5, 1, 9)
    assert batch.last_offset == base + records[-1].offset_delta
    got = [(r.offset - base, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert got == _records_tuple(records)


@SETTINGS
@given(records=record_lists(), codec=st.sampled_from([0, 1, 2, 3, 4]), base=st.integers(0, 2**40))
def test_our_batches_decode_in_aiokafka(records: list[Record], codec: int, base: int) -> None:
    from aiokafka.record.default_records import DefaultRecordBatch

    data = build_batch(records, base_offset=base, compression=codec)
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    assert batch.compression_type == codec
    got = [(r.offset - base, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert got == _records_tuple(records)


@SETTINGS
@given(
    records=record_lists(min_size=0),
    codec=st.sampled_from(list(Compression)),
    base=st.integers(0, 2**62),
    extra=st.integers(0, 1000),
    transactional=st.booleans(),
    log_append=st.booleans(),
)
def test_build_parse_round_trip(
    records: list[Record], codec: Compression, base: int, extra: int, transactional: bool, log_append: bool
) -> None:
    last = min((records[-1].offset_delta if records else 0) + extra, 2**31 - 1)
    ts_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
    data = build_batch(
        records,
        base_offset=base,
        compression=codec,
        last_offset_delta=last,
        producer_id=11 if transactional else -1,
        producer_epoch=2 if transactional else -1,
        base_sequence=0 if transactional else -1,
        is_transactional=transactional,
        timestamp_type=ts_type,
        max_timestamp=123456 if log_append else None,
    )
    header = validate_batch(data, decode=True)
    assert header.base_offset == base
    assert header.last_offset == base + last
    assert header.records_count == len(records)
    assert header.is_transactional is transactional
    assert header.timestamp_type is ts_type
    assert header.size == len(data)
    assert header.compression == (codec if records else Compression.NONE)
    got = decode_records(data)
    if log_append:
        assert all(r.timestamp == 123456 for r in got)
        got = [r._replace(timestamp=o.timestamp) for r, o in zip(got, records, strict=True)]
    assert _records_tuple(got) == _records_tuple(records)
    assert list(iter_records(data)) == got or log_append


@SETTINGS
@given(batches=st.lists(record_lists(max_size=5), min_size=1, max_size=5), first=st.integers(0, 2**50))
def test_runs_of_batches_walk_and_reoffset(batches: list[list[Record]], first: int) -> None:
    built = [
        build_batch(recs, compression=Compression.GZIP if i % 2 else Compression.NONE)
        for i, recs in enumerate(batches)
    ]
    buf = bytearray(b"".join(built))
    positions = [pos for pos, _ in iter_batches(buf)]
    assert positions == [sum(len(b) for b in built[:i]) for i in range(len(built))]
    nxt = patch_base_offsets(buf, first)
    expect = first
    for (pos, header), recs in zip(iter_batches(buf), batches, strict=True):
        assert header.base_offset == expect
        validate_batch(buf, pos, decode=True)
        expect += recs[-1].offset_delta + 1
    assert nxt == expect
    summary = summarize_batches(buf)
    assert summary.batch_count == len(batches)
    assert summary.record_count == sum(len(b) for b in batches)
    assert summary.offset_count == expect - first
    assert summary.size == len(buf)


@settings(max_examples=150, deadline=None)
@given(records=record_lists(max_size=6), codec=st.sampled_from([0, 1, 2, 3, 4]), data=st.data())
def test_mutated_batches_only_raise_record_batch_error(
    records: list[Record], codec: int, data: st.DataObject
) -> None:
    buf = bytearray(build_batch(records, compression=codec))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    for candidate in (bytes(buf), bytes(buf[:cut])):
        try:
            validate_batch(candidate)
        except RecordBatchError:
            pass
        try:
            decode_records(candidate, max_decompressed_bytes=1 << 20)
        except RecordBatchError:
            pass
        try:
            list(iter_batches(candidate))
        except RecordBatchError:
            pass


# ---------------------------------------------------------------------------------------------
# corruption and limits


def _sample(**kw: Any) -> bytes:
    recs = [
        Record(0, 1000, b"k0", b"v0", [("h", b"x")]),
        Record(1, 1001, None, b"v1"),
        Record(2, 1005, b"k2", None),
    ]
    return build_batch(recs, **kw)


def _recrc(buf: bytearray) -> bytearray:
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return buf


@pytest.mark.parametrize("index", [17, 21, 30, 45, 57, 61, 70, -1])
def test_flipped_byte_fails_crc(index: int) -> None:
    buf = bytearray(_sample(compression=Compression.GZIP))
    buf[index] ^= 0x40
    with pytest.raises(CorruptBatchError, match="CRC-32C") as exc:
        validate_batch(buf)
    assert exc.value.position == 0


def test_bytes_outside_crc_do_not_fail_it() -> None:
    buf = bytearray(_sample())
    buf[3] ^= 0xFF  # baseOffset
    buf[13] ^= 0xFF  # partitionLeaderEpoch
    validate_batch(buf, decode=True)


def test_truncated_batch_names_its_position() -> None:
    first = _sample()
    second = _sample(compression=Compression.ZSTD)
    whole = first + second
    for cut in [len(first) + 5, len(first) + 30, len(whole) - 1]:
        with pytest.raises(TruncatedBatchError, match=f"byte {len(first)}") as exc:
            list(iter_batches(whole[:cut]))
        assert exc.value.position == len(first)
        with pytest.raises(TruncatedBatchError):
            validate_batch(whole[:cut], len(first))
    # a window that ends inside a batch is truncated too, even if the buffer goes on
    with pytest.raises(TruncatedBatchError, match=f"byte {len(first)}"):
        list(iter_batches(whole, 0, len(whole) - 1))
    assert [p for p, _ in iter_batches(whole, len(first))] == [len(first)]


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_refused_clearly(magic: int) -> None:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=1000 if magic else None, key=b"k", value=b"v")
    legacy = bytes(builder.build())
    assert legacy[16] == magic
    for call in (
        lambda: list(iter_batches(legacy)),
        lambda: validate_batch(legacy),
        lambda: decode_records(legacy),
    ):
        with pytest.raises(UnsupportedMagicError, match=f"magic {magic}.*only magic 2") as exc:
            call()
        assert exc.value.position == 0
    assert issubclass(UnsupportedMagicError, ValueError)


def test_header_sanity_checks() -> None:
    good = _sample()
    buf = bytearray(good)
    struct.pack_into(">i", buf, 8, 10)  # batchLength below the header size
    with pytest.raises(CorruptBatchError, match="batchLength 10"):
        list(iter_batches(buf))
    buf = _recrc(bytearray(good))
    struct.pack_into(">i", buf, 57, -1)
    with pytest.raises(CorruptBatchError, match="recordsCount -1"):
        validate_batch(_recrc(buf))
    buf = bytearray(good)
    struct.pack_into(">i", buf, 23, 0)  # lastOffsetDelta 0 for 3 records
    with pytest.raises(CorruptBatchError, match="lastOffsetDelta 0 for 3"):
        validate_batch(_recrc(buf))
    buf = bytearray(good)
    struct.pack_into(">h", buf, 21, 5)  # codec id 5
    with pytest.raises(CorruptBatchError, match="codec id 5"):
        validate_batch(_recrc(buf))
    with pytest.raises(CorruptBatchError, match="over the limit of 50"):
        validate_batch(good, max_batch_bytes=50)
    assert DEFAULT_MAX_BATCH_BYTES >= 1 << 20


def test_decode_checks_records_against_header() -> None:
    good = _sample()
    # more records declared than present
    buf = bytearray(good)
    struct.pack_into(">i", buf, 57, 4)
    struct.pack_into(">i", buf, 23, 3)
    with pytest.raises(CorruptBatchError, match="record 3 of 4"):
        validate_batch(_recrc(buf), decode=True)
    # fewer declared: bytes left over
    buf = bytearray(good)
    struct.pack_into(">i", buf, 57, 2)
    with pytest.raises(CorruptBatchError, match="left after its 2 records"):
        validate_batch(_recrc(buf), decode=True)
    # lastOffsetDelta below the last record's delta is caught by decoding
    recs = [Record(0, 1, b"a", b"b"), Record(5, 1, b"a", b"b")]
    buf = bytearray(build_batch(recs))
    struct.pack_into(">i", buf, 23, 4)
    with pytest.raises(CorruptBatchError, match="past lastOffsetDelta 4"):
        validate_batch(_recrc(buf), decode=True)
    validate_batch(build_batch(recs), decode=True)
    with pytest.raises(CorruptBatchError, match="expected 1"):
        validate_batch(build_batch(recs), contiguous=True)
    with pytest.raises(CorruptBatchError, match="lastOffsetDelta 9 for 2 contiguous"):
        validate_batch(
            build_batch(recs[:1] + [recs[1]._replace(offset_delta=1)], last_offset_delta=9), contiguous=True
        )


def test_malformed_record_inside_batch() -> None:
    good = bytearray(_sample())
    good[BATCH_HEADER_SIZE] = 0x7F  # first record's length varint: -64
    with pytest.raises(CorruptBatchError, match="record 0 of 3 is malformed") as exc:
        decode_records(_recrc(good))
    assert exc.value.position == 0
    good = bytearray(_sample())
    good[BATCH_HEADER_SIZE + 4] = 0x05  # length, attributes, timestampDelta, offsetDelta, key length -3
    with pytest.raises(CorruptBatchError, match="key length -3"):
        decode_records(good)


def test_zip_bomb_batch_is_refused() -> None:
    bomb = [Record(0, 0, None, b"\0" * (4 << 20))]
    for codec in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD):
        data = build_batch(bomb, compression=codec)
        assert len(data) < 300_000
        validate_batch(data)
        with pytest.raises(RecordBatchError, match="limit") as exc:
            decode_records(data, max_decompressed_bytes=1 << 20)
        assert exc.value.position == 0
        with pytest.raises(RecordBatchError, match="limit"):
            validate_batch(data, decode=True, max_decompressed_bytes=1 << 20)
        assert decode_records(data, max_decompressed_bytes=8 << 20)[0].value == b"\0" * (4 << 20)


def test_records_count_cannot_outrun_the_bytes() -> None:
    buf = bytearray(_sample())
    struct.pack_into(">i", buf, 57, 2**31 - 1)
    struct.pack_into(">i", buf, 23, 2**31 - 1)
    with pytest.raises(CorruptBatchError, match="declares 2147483647 records"):
        decode_records(buf)


# ---------------------------------------------------------------------------------------------
# building, offsets, control batches


def test_holes_timestamps_headers_keys_values_survive() -> None:
    recs = [
        Record(0, 5000, b"a", b"1", [("x", b"1"), ("x", None)]),
        Record(7, 4000, None, None, []),
        Record(1000, 9000, b"", b"", [("", b"")]),
        Record(2**31 - 1, -5, b"z" * 300, b"\xff" * 70000, [("k\udcff", b"\x00")]),  # non-UTF-8 header key
    ]
    for codec in Compression:
        data = build_batch(recs, base_offset=2**40, compression=codec)
        header = validate_batch(data, decode=True)
        assert header.base_timestamp == 5000 and header.max_timestamp == 9000
        assert header.last_offset_delta == 2**31 - 1
        assert _records_tuple(decode_records(data)) == _records_tuple(recs)
    raw = build_batch(recs)
    assert b"k\xff" in raw  # the header key's bytes went out as they came in


def test_build_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        build_batch([Record(1, 0, None, None), Record(1, 0, None, None)])
    with pytest.raises(ValueError, match="strictly increasing"):
        build_batch([Record(-1, 0, None, None)])
    with pytest.raises(ValueError, match="last_offset_delta 0 is less"):
        build_batch([Record(0, 0, None, None), Record(3, 0, None, None)], last_offset_delta=0)
    with pytest.raises(ValueError, match="needs last_offset_delta"):
        build_batch([])
    with pytest.raises(TypeError, match="key must be bytes"):
        build_batch([Record(0, 0, "text", None)])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="header value"):
        build_batch([Record(0, 0, None, None, [("h", 5)])])  # type: ignore[list-item]


def test_empty_batch_keeps_producer_state() -> None:
    data = build_batch(
        [],
        base_offset=100,
        last_offset_delta=9,
        producer_id=77,
        producer_epoch=4,
        base_sequence=50,
        max_timestamp=1234,
        compression=Compression.ZSTD,
    )
    header = validate_batch(data, decode=True)
    assert header.records_count == 0 and header.last_offset == 109 and header.size == BATCH_HEADER_SIZE
    assert header.compression is Compression.NONE
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 4, 50)
    assert decode_records(data) == []


def test_delete_horizon() -> None:
    recs = [Record(0, 1000, b"k", None), Record(1, 2000, b"j", b"v")]
    data = build_batch(recs, delete_horizon_ms=99_000)
    header = validate_batch(data, decode=True)
    assert header.has_delete_horizon and header.delete_horizon_ms == 99_000 == header.base_timestamp
    assert _records_tuple(decode_records(data)) == _records_tuple(recs)
    assert parse_header(build_batch(recs)).delete_horizon_ms is None


def test_control_batch() -> None:
    from kafka.record.default_records import DefaultRecordBatch

    data = build_control_batch(
        ControlRecordType.COMMIT,
        producer_id=9,
        producer_epoch=2,
        coordinator_epoch=5,
        timestamp=777,
        base_offset=40,
    )
    header = validate_batch(data, decode=True, contiguous=True)
    assert header.is_control and header.is_transactional and header.producer_id == 9
    (rec,) = decode_records(data)
    assert parse_control_record(rec) == (ControlRecordType.COMMIT, 5)
    kbatch = DefaultRecordBatch(data)
    assert kbatch.is_control_batch and kbatch.is_transactional
    (krec,) = list(kbatch)
    assert krec.commit and krec.offset == 40
    abort = decode_records(
        build_control_batch(
            ControlRecordType.ABORT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=0
        )
    )
    assert parse_control_record(abort[0]) == (ControlRecordType.ABORT, 0)
    with pytest.raises(CorruptBatchError):
        parse_control_record(Record(0, 0, b"\x00", None))


def test_patch_base_offset_in_place_keeps_crc() -> None:
    buf = bytearray(_sample(compression=Compression.LZ4))
    patch_base_offset(buf, 0, 2**62)
    assert parse_header(buf).base_offset == 2**62
    validate_batch(buf, decode=True)
    mv = memoryview(buf)
    patch_base_offset(mv, 0, 5)
    assert parse_header(buf).base_offset == 5
    with pytest.raises(TypeError):
        patch_base_offset(memoryview(bytes(buf)), 0, 1)  # read-only
    with pytest.raises(TruncatedBatchError):
        patch_base_offset(buf, len(buf) - 10, 1)
    with pytest.raises(UnsupportedMagicError):
        patch_base_offset(buf, 1, 1)


def test_patch_run_with_window() -> None:
    a = build_batch([Record(0, 1, b"a", b"1"), Record(1, 2, b"b", b"2")])
    b = build_batch([Record(0, 3, b"c", b"3"), Record(4, 4, b"d", b"4")])  # compacted: lastOffsetDelta 4
    c = build_batch([], last_offset_delta=2, max_timestamp=5)
    prefix = b"\x00" * 13
    buf = bytearray(prefix + a + b + c + b"trailer")
    end = len(buf) - len(b"trailer")
    assigned = [(p, o) for p, _, o in iter_assigned_offsets(buf, 10, len(prefix), end)]
    assert assigned == [(13, 10), (13 + len(a), 12), (13 + len(a) + len(b), 17)]
    assert patch_base_offsets(buf, 10, len(prefix), end) == 20
    assert [h.base_offset for _, h in iter_batches(buf, len(prefix), end)] == [10, 12, 17]
    assert buf.endswith(b"trailer") and buf.startswith(prefix)


def test_header_helpers() -> None:
    header = parse_header(
        _sample(compression=Compression.SNAPPY, producer_id=3, producer_epoch=0, base_sequence=0)
    )
    assert isinstance(header, BatchHeader)
    assert header.compression is Compression.SNAPPY and header.compression_id == 2
    assert header.has_producer_id and not header.is_control and not header.is_transactional
    assert header.next_offset == header.last_offset + 1 == 3
    with pytest.raises(AttributeError):
        header.base_offset = 1  # type: ignore[misc]
    with pytest.raises(TruncatedBatchError):
        parse_header(b"\x00" * 16 + b"\x02" + b"\x00" * 20)
