"""`fileformat.log_validator`: produced batches are checked record by record, as Kafka's
LogValidator does. Every lying batch here has a correct CRC (recomputed after the lie), which is
what made such batches get through before."""

from __future__ import annotations

import resource
import struct

import cramjam
import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from skiff.fileformat import batch_header, codecs, record_build, record_decode
from skiff.fileformat.batch_header import Compression, parse_header
from skiff.fileformat.log_validator import (
    CorruptRecordsError,
    InvalidRecordError,
    InvalidTimestampError,
    timestamp_bounds_ms,
    validate_produced_batch,
    validated_timestamps,
)
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record, validate_batch

NOW = 1_700_000_000_000
U32 = struct.Struct(">I")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
LAST_OFFSET_DELTA, MAX_TIMESTAMP, BASE_SEQUENCE, RECORDS_COUNT = 23, 35, 53, 57


def fix_crc(batch: bytes | bytearray) -> bytes:
    buf = bytearray(batch)
    U32.pack_into(buf, batch_header.CRC_OFFSET, crc32c.crc32c(bytes(buf[batch_header.ATTRIBUTES_OFFSET :])))
    return bytes(buf)


def patched(batch: bytes, at: int, fmt: struct.Struct, value: int) -> bytes:
    buf = bytearray(batch)
    fmt.pack_into(buf, at, value)
    return fix_crc(buf)


def raw_batch(payload: bytes, count: int, *, attributes: int = 0, base_ts: int = NOW) -> bytes:
    """A batch around already-encoded records (so the records can lie), with a correct CRC."""
    buf = bytearray(batch_header.BATCH_HEADER_SIZE) + payload
    batch_header._HEADER.pack_into(
        buf, 0, 0, len(buf) - 12, -1, 2, 0, attributes, count - 1, base_ts, base_ts, -1, -1, -1, count
    )
    return fix_crc(buf)


def encoded(*recs: tuple[int, int, bytes | None, bytes | None]) -> bytes:
    """(offset delta, timestamp delta, key, value) records in wire form, deltas as given."""
    out = bytearray()
    for delta, ts_delta, key, value in recs:
        record_build._encode_record(out, delta, ts_delta, key, value, ())
    return bytes(out)


def check(batch: bytes, **kw) -> int:
    validate_batch(batch, 0, counts=False)  # the CRC and lengths are right: only the records lie
    kw.setdefault("now_ms", NOW)
    return validate_produced_batch(batch, 0, parse_header(batch), **kw)


def good(n: int = 3, codec: Compression = Compression.NONE, **kw) -> bytes:
    recs = [Record(i, NOW + i, f"k{i}".encode(), b"v" * i, [("h", b"x")] if i == 1 else ()) for i in range(n)]
    return build_batch(recs, compression=codec, **kw)


@pytest.mark.parametrize("codec", list(Compression))
def test_well_formed_batches_pass_and_report_their_max_timestamp(codec):
    assert check(good(5, codec)) == NOW + 4
    assert check(good(1, codec)) == NOW


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
@pytest.mark.parametrize(
    "deltas",
    [[0, 1, 2], [5, 3, 9], [0, -7, 4], [-2, -9, -1], [3, -1, 0], [0], [0, -300, 2**40]],
    ids=lambda d: ",".join(map(str, d)),
)
def test_the_smallest_timestamp_is_exact_even_when_records_go_back_in_time(codec, deltas):
    """The base timestamp is the first record's, not the smallest: a negative delta makes an
    older record, and the min (which lets Spark skip chunks) must never be above it."""
    payload = encoded(*[(i, d, b"k", b"v") for i, d in enumerate(deltas)])
    if codec is Compression.NONE:
        batch = raw_batch(payload, len(deltas))
    else:
        batch = raw_batch(codecs.compress(codec, payload), len(deltas), attributes=codec)
    got = validated_timestamps(batch, 0, parse_header(batch), now_ms=NOW)
    # the base when no delta is negative (exact when the first delta is 0, as producers write)
    assert got == (NOW + min(0, *deltas), NOW + max(deltas))
    assert check(batch) == got[1]
    smallest = min(r.timestamp for r in record_decode.decode_records(batch))
    assert got[0] <= smallest
    assert got[0] == smallest or deltas[0] != 0


def test_snappy_raw_block_as_librdkafka_sends_it_passes():
    payload = encoded((0, 0, None, b"a"), (1, 5, b"k", None))
    batch = raw_batch(bytes(cramjam.snappy.compress_raw(payload)), 2, attributes=Compression.SNAPPY)
    assert check(batch) == NOW + 5


def test_a_record_count_larger_than_the_records_is_refused():
    batch = good(3)
    lie = patched(patched(batch, RECORDS_COUNT, I32, 4), LAST_OFFSET_DELTA, I32, 3)
    with pytest.raises(InvalidRecordError, match="holds 3 records, its header declares 4"):
        check(lie)


def test_a_record_count_smaller_than_the_records_is_refused():
    lie = patched(patched(good(3), RECORDS_COUNT, I32, 2), LAST_OFFSET_DELTA, I32, 1)
    with pytest.raises(InvalidRecordError, match="bytes left after the 2 records"):
        check(lie)


def test_a_count_that_disagrees_with_last_offset_delta_is_refused():
    with pytest.raises(InvalidRecordError, match="lastOffsetDelta"):
        check(patched(good(3), LAST_OFFSET_DELTA, I32, 5))
    with pytest.raises(InvalidRecordError, match="lastOffsetDelta"):
        check(patched(patched(good(3), RECORDS_COUNT, I32, 0), LAST_OFFSET_DELTA, I32, -1))


@pytest.mark.parametrize("change", [-1, +1])
def test_a_wrong_record_length_is_refused(change):
    payload = bytearray(encoded((0, 0, None, b"abc"), (1, 0, None, b"def")))
    assert payload[0] == 2 * 9  # zigzag length of the first record (9 bytes)
    payload[0] += 2 * change
    with pytest.raises(InvalidRecordError, match="record 0"):
        check(raw_batch(bytes(payload), 2))


@pytest.mark.parametrize(
    "deltas",
    [(0, 1, 1), (0, 0, 1), (1, 2, 3), (0, 2, 3), (0, 1, 3)],
    ids=["repeat-last", "repeat-first", "not-from-0", "gap", "gap-at-end"],
)
def test_offset_deltas_must_be_exactly_0_to_n_minus_1(deltas):
    payload = encoded(*[(d, 0, None, b"v") for d in deltas])
    with pytest.raises(InvalidRecordError, match="offset delta"):
        check(raw_batch(payload, 3))


def test_negative_key_and_value_lengths_other_than_null_are_refused():
    payload = bytearray(encoded((0, 0, None, b"v")))
    payload[4] = 3  # key length zigzag -2
    with pytest.raises(InvalidRecordError, match="key length -2"):
        check(raw_batch(bytes(payload), 1))


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_garbage_compressed_records_are_corrupt(codec):
    batch = raw_batch(bytes(range(7, 250)) * 3, 3, attributes=codec)
    with pytest.raises(CorruptRecordsError):
        check(batch)


def test_compressed_records_that_lie_inside_are_invalid():
    inner = encoded((0, 0, None, b"a" * 20), (1, 0, None, b"b" * 20))
    batch = raw_batch(codecs.compress(Compression.ZSTD, inner), 3, attributes=Compression.ZSTD)
    with pytest.raises(InvalidRecordError, match="holds 2 records, its header declares 3"):
        check(batch)


def test_a_decompression_bomb_is_refused_without_allocating_its_size():
    """~34 KB of zstd that inflates to 1 GiB; the cap is 64 MiB and nothing near 1 GiB is allocated."""
    comp = cramjam.zstd.Compressor(level=3)
    zeros = bytes(1 << 20)
    for _ in range(1024):
        comp.compress(zeros)
    bomb = bytes(comp.finish())
    assert len(bomb) < 64 * 1024
    batch = raw_batch(bomb, 1000, attributes=Compression.ZSTD)
    peak_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(CorruptRecordsError, match="limit"):
        check(batch)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before_kib
    assert grown_kib < 256 * 1024  # well under the 1 GiB the bomb asks for


def test_compacted_topics_need_keys_and_every_keyless_record_is_named():
    keyless = build_batch(
        [
            Record(0, NOW, b"k", b"v"),
            Record(1, NOW, None, b"v"),
            Record(2, NOW, b"k", b"v"),
            Record(3, NOW, None, b""),
        ]
    )
    assert check(keyless) == NOW
    with pytest.raises(InvalidRecordError, match="Compacted topic cannot accept message without key") as e:
        check(keyless, compacted=True)
    assert e.value.record_errors == (
        (1, "Compacted topic cannot accept message without key"),
        (3, "Compacted topic cannot accept message without key"),
    )
    assert str(e.value).startswith("One or more records have been rejected due to 2 record errors in total")
    assert "RecordError(batchIndex=1, message=" in str(e.value)
    assert check(good(3), compacted=True) == NOW + 2


def test_a_malformed_record_wins_over_a_missing_key():
    payload = bytearray(encoded((0, 0, None, b"v"), (1, 0, b"k", b"v"), (1, 0, b"k", b"v")))
    with pytest.raises(InvalidRecordError, match="record 2 has offset delta 1, expected 2") as e:
        check(raw_batch(bytes(payload), 3), compacted=True)
    assert e.value.record_errors == ((2, "record 2 has offset delta 1, expected 2"),)


@pytest.mark.parametrize(
    ("deltas", "index"), [((0, 1, 1), 2), ((0, 0, 1), 1), ((1, 2, 3), 0)], ids=["last", "middle", "first"]
)
def test_a_malformed_record_is_named_by_its_index(deltas, index):
    with pytest.raises(InvalidRecordError) as e:
        check(raw_batch(encoded(*[(d, 0, None, b"v") for d in deltas]), 3))
    assert [i for i, _ in e.value.record_errors] == [index]
    assert f"record {index} has offset delta" in e.value.record_errors[0][1]


def test_a_record_running_past_the_batch_is_named_and_batch_faults_name_none():
    payload = encoded((0, 0, None, b"abc"), (1, 0, None, b"def"))
    truncated = raw_batch(payload[:-2], 2)  # the second record's value is cut short
    with pytest.raises(InvalidRecordError) as e:
        check(truncated)
    assert e.value.record_errors == ((1, "record 1 runs past the end of the batch"),)
    with pytest.raises(InvalidRecordError, match="holds 3 records, its header declares 4") as e:
        check(patched(patched(good(3), RECORDS_COUNT, I32, 4), LAST_OFFSET_DELTA, I32, 3))
    assert e.value.record_errors == ()  # a count that lies is the batch's fault: no record 3
    with pytest.raises(InvalidRecordError) as e:  # bytes after the last record: the batch's fault
        check(patched(patched(good(3), RECORDS_COUNT, I32, 2), LAST_OFFSET_DELTA, I32, 1))
    assert e.value.record_errors == ()
    with pytest.raises(InvalidRecordError) as e:
        check(patched(good(3), LAST_OFFSET_DELTA, I32, 5))
    assert e.value.record_errors == ()


def test_control_batches_and_negative_sequences_are_refused():
    control = record_build.build_control_batch(
        record_decode.ControlRecordType.COMMIT,
        producer_id=1,
        producer_epoch=0,
        coordinator_epoch=0,
        timestamp=NOW,
    )
    with pytest.raises(InvalidRecordError, match="control records"):
        check(control)
    idem = good(2, producer_id=7, producer_epoch=0, base_sequence=0)
    assert check(idem) == NOW + 1
    with pytest.raises(InvalidRecordError, match="sequence number -1"):
        check(patched(idem, BASE_SEQUENCE, I32, -1))


def test_a_producer_may_not_set_log_append_time():
    batch = good(2, timestamp_type=batch_header.TimestampType.LOG_APPEND_TIME)
    with pytest.raises(InvalidTimestampError, match="LogAppendTime"):
        check(batch)


def test_timestamps_outside_the_topic_bounds_are_refused_and_no_timestamp_is_exempt():
    old = build_batch([Record(0, NOW - 10_000, None, b"a"), Record(1, NOW, None, b"b")])
    assert check(old, timestamp_before_max_ms=10_000) == NOW
    with pytest.raises(
        InvalidTimestampError, match=f"Timestamp {NOW - 10_000} of message with offset 0"
    ) as e:
        check(old, timestamp_before_max_ms=9_999)
    assert str(e.value).startswith("One or more records have been rejected due to invalid timestamp")
    assert e.value.record_errors == (
        (
            0,
            f"Timestamp {NOW - 10_000} of message with offset 0 is out of range. The timestamp should be"
            f" within [{NOW - 9_999}, {NOW + 2**63 - 1}]",
        ),
    )
    future = build_batch(
        [Record(0, NOW, None, b"a"), Record(1, NOW + 5_000, None, b"b"), Record(2, NOW + 6_000, None, b"c")]
    )
    with pytest.raises(InvalidTimestampError, match="offset 1") as e:
        check(future, timestamp_after_max_ms=4_999)
    assert [i for i, _ in e.value.record_errors] == [1, 2]
    assert e.value.record_errors[0][1] == (
        f"Timestamp {NOW + 5_000} of message with offset 1 is out of range. The timestamp should be"
        f" within [{NOW - (2**63 - 1)}, {NOW + 4_999}]"
    )
    no_ts = build_batch([Record(0, -1, None, b"a"), Record(1, NOW, None, b"b")])
    assert check(no_ts, timestamp_before_max_ms=1000, timestamp_after_max_ms=1000) == NOW
    # a LogAppendTime topic ignores the producer's timestamps
    assert check(old, timestamp_before_max_ms=1, log_append_time=True) == NOW


def test_timestamp_bounds_fall_back_to_the_difference_config():
    unbounded = 2**63 - 1
    assert timestamp_bounds_ms(unbounded, unbounded, unbounded) == (unbounded, unbounded)
    assert timestamp_bounds_ms(unbounded, unbounded, 60_000) == (60_000, 60_000)
    assert timestamp_bounds_ms(5, unbounded, 60_000) == (5, 60_000)


def test_the_max_timestamp_is_the_records_own_whatever_the_header_says():
    assert check(patched(good(3), MAX_TIMESTAMP, I64, 12)) == NOW + 2


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_corruptions_are_refused_exactly_when_the_full_decoder_refuses_them(data):
    """Oracle: flip bytes of the records (CRC fixed) and compare with `validate_batch(decode=True,
    contiguous=True)`, the slow reference decoder: they must agree on every mutation."""
    recs = [
        Record(i, NOW + i, b"k" if i % 2 else None, b"v" * i, [("h", b"1")] if i == 2 else ())
        for i in range(4)
    ]
    batch = bytearray(build_batch(recs))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(batch_header.BATCH_HEADER_SIZE, len(batch) - 1))
        batch[at] = data.draw(st.integers(0, 255))
    lie = fix_crc(batch)
    try:
        validate_batch(lie, 0, decode=True, contiguous=True)
        reference_ok = True
    except batch_header.RecordBatchError:
        reference_ok = False
    try:
        validate_produced_batch(lie, 0, parse_header(lie), now_ms=NOW)
        ours_ok = True
    except (InvalidRecordError, CorruptRecordsError):
        ours_ok = False
    assert ours_ok == reference_ok


@pytest.mark.parametrize(
    "timestamps", [(NOW - 100, NOW + 5), (NOW - 100, NOW - 50), (NOW + 7, NOW - 300, NOW)], ids=str
)
def test_the_max_timestamp_is_right_with_deltas_below_the_base_timestamp(timestamps):
    batch = build_batch([Record(i, ts, None, b"v") for i, ts in enumerate(timestamps)], base_timestamp=NOW)
    assert check(batch) == max(timestamps)
