"""Produce over real TCP refuses lying batches per partition, with Kafka's error codes and a
message, and stores nothing of them: each lie below has a correct CRC, and before the fix each
was acked and then stalled consumers at its offset for good."""

from __future__ import annotations

import asyncio
import datetime
import struct
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import cramjam
import crc32c
import pytest
from kio.schema.errors import ErrorCode
from skiff.agent.config import AgentConfig
from skiff.agent.handlers.produce import validate_batches
from skiff.agent.runtime import RunningAgent, start_agent
from skiff.fileformat import batch_header, record_build, record_decode
from skiff.fileformat.batch_header import Compression
from skiff.fileformat.objectstore import open_async_store
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService

from tests.component.fake_metadata import FlakyMetadataClient
from tests.support.kafka_wire import fetch_request, produce_request, send_request

NOW = 1_700_000_000_000


def fix_crc(batch: bytes | bytearray) -> bytes:
    buf = bytearray(batch)
    struct.pack_into(
        ">I", buf, batch_header.CRC_OFFSET, crc32c.crc32c(bytes(buf[batch_header.ATTRIBUTES_OFFSET :]))
    )
    return bytes(buf)


def batch_of(n: int, *, key: bytes | None = b"k", ts: int | None = None) -> bytes:
    now = int(time.time() * 1000) if ts is None else ts
    return build_batch([Record(i, now, key, b"value-%d" % i) for i in range(n)])


def count_lie(n: int) -> bytes:
    """recordsCount and lastOffsetDelta say n + 1; there are n records."""
    buf = bytearray(batch_of(n))
    struct.pack_into(">i", buf, 57, n + 1)
    struct.pack_into(">i", buf, 23, n)
    return fix_crc(buf)


def repeated_delta() -> bytes:
    """Three records whose offset deltas are 0, 1, 1."""
    out = bytearray()
    for delta in (0, 1, 1):
        record_build._encode_record(out, delta, 0, b"k", b"v", ())
    buf = bytearray(batch_header.BATCH_HEADER_SIZE) + out
    batch_header._HEADER.pack_into(buf, 0, 0, len(buf) - 12, -1, 2, 0, 0, 2, NOW, NOW, -1, -1, -1, 3)
    return fix_crc(buf)


def zstd_bomb() -> bytes:
    """~34 KB of zstd records inflating to 1 GiB."""
    comp = cramjam.zstd.Compressor(level=3)
    zeros = bytes(1 << 20)
    for _ in range(1024):
        comp.compress(zeros)
    payload = bytes(comp.finish())
    buf = bytearray(batch_header.BATCH_HEADER_SIZE) + payload
    batch_header._HEADER.pack_into(
        buf, 0, 0, len(buf) - 12, -1, 2, 0, int(Compression.ZSTD), 999, NOW, NOW, -1, -1, -1, 1000
    )
    return fix_crc(buf)


def gzip_garbage() -> bytes:
    buf = bytearray(batch_header.BATCH_HEADER_SIZE) + bytes(range(256)) * 4
    batch_header._HEADER.pack_into(
        buf, 0, 0, len(buf) - 12, -1, 2, 0, int(Compression.GZIP), 9, NOW, NOW, -1, -1, -1, 10
    )
    return fix_crc(buf)


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[RunningAgent]:
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = FlakyMetadataClient(LocalMetadataClient(service, owns_service=True))
    store = open_async_store(f"memory://produce-{uuid.uuid4().hex}")
    cfg = AgentConfig.from_env({}, agent_id="a1", host="127.0.0.1", port=0, flush_interval_ms=20)
    running = await start_agent(cfg, md, store)  # type: ignore[arg-type]
    await md.create_topic("lies", 5, {})
    await md.create_topic("compacted", 1, {"cleanup.policy": "compact"})
    await md.create_topic("bounded", 1, {"message.timestamp.before.max.ms": "60000"})
    try:
        yield running
    finally:
        await running.close()


def _produce(bootstrap: str, topic: str, batches: dict[int, bytes]) -> dict[int, tuple[int, str | None]]:
    resp = send_request(bootstrap, produce_request(topic, batches), timeout_s=30).parse()
    return {int(p.index): (int(p.error_code), p.error_message) for p in resp.responses[0].partition_responses}


def _high_watermarks(bootstrap: str, topic: str, partitions: range) -> list[int]:
    req = fetch_request(topic, [(p, 0, 1 << 20) for p in partitions], max_bytes=1 << 20)
    parts = send_request(bootstrap, req, timeout_s=30).parse().responses[0].partitions
    return [int(p.high_watermark) for p in sorted(parts, key=lambda p: p.partition_index)]


async def test_lying_batches_are_refused_per_partition_and_nothing_is_stored(agent):
    bootstrap = f"127.0.0.1:{agent.port}"
    answers = await asyncio.to_thread(
        _produce,
        bootstrap,
        "lies",
        {0: batch_of(3), 1: count_lie(3), 2: repeated_delta(), 3: zstd_bomb(), 4: gzip_garbage()},
    )
    codes = {p: code for p, (code, _) in answers.items()}
    assert codes == {
        0: ErrorCode.none,
        1: ErrorCode.invalid_record,
        2: ErrorCode.invalid_record,
        3: ErrorCode.corrupt_message,
        4: ErrorCode.corrupt_message,
    }
    assert "holds 3 records, its header declares 4" in answers[1][1]
    assert "offset delta 1, expected 2" in answers[2][1]
    assert "limit" in answers[3][1]
    assert "gzip" in answers[4][1]
    assert await asyncio.to_thread(_high_watermarks, bootstrap, "lies", range(5)) == [3, 0, 0, 0, 0]


async def test_two_batches_for_one_partition_are_refused_as_kafka_does(agent):
    bootstrap = f"127.0.0.1:{agent.port}"
    answers = await asyncio.to_thread(_produce, bootstrap, "lies", {0: batch_of(1) + batch_of(1)})
    assert answers[0][0] == ErrorCode.invalid_record and "one record batch per partition" in answers[0][1]
    assert await asyncio.to_thread(_high_watermarks, bootstrap, "lies", range(1)) == [0]


async def test_compacted_topics_refuse_records_without_keys(agent):
    bootstrap = f"127.0.0.1:{agent.port}"
    answers = await asyncio.to_thread(_produce, bootstrap, "compacted", {0: batch_of(2, key=None)})
    assert answers[0][0] == ErrorCode.invalid_record
    assert "Compacted topic cannot accept message without key" in answers[0][1]
    assert (await asyncio.to_thread(_produce, bootstrap, "compacted", {0: batch_of(2)}))[0][0] == 0


async def test_timestamps_out_of_the_topic_bounds_are_refused(agent):
    bootstrap = f"127.0.0.1:{agent.port}"
    answers = await asyncio.to_thread(_produce, bootstrap, "bounded", {0: batch_of(1, ts=NOW)})
    assert answers[0][0] == ErrorCode.invalid_timestamp and "out of range" in answers[0][1]
    assert (await asyncio.to_thread(_produce, bootstrap, "bounded", {0: batch_of(1)}))[0][0] == 0


def test_a_header_max_timestamp_that_lies_is_corrected_with_a_valid_crc():
    """Kafka's setMaxTimestamp: the stored batch says the records' own largest timestamp."""
    batch = bytearray(build_batch([Record(0, NOW, b"k", b"a"), Record(1, NOW + 40, b"k", b"b")]))
    struct.pack_into(">q", batch, 35, NOW + 999_999)  # maxTimestamp
    (pending,) = validate_batches(
        fix_crc(batch), max_message_bytes=1 << 20, log_append_time_ms=None, now_ms=NOW
    )
    assert pending.max_timestamp == NOW + 40
    header = record_decode.validate_batch(pending.data, 0)  # CRC recomputed
    assert header.max_timestamp == NOW + 40
    # a truthful header is stored as sent, without a copy
    honest = build_batch([Record(0, NOW, b"k", b"a")])
    (pending,) = validate_batches(honest, max_message_bytes=1 << 20, log_append_time_ms=None, now_ms=NOW)
    assert pending.data is honest


def test_a_batch_min_timestamp_is_its_oldest_record_not_its_first():
    """The chunk's min timestamp (Spark prunes upper time bounds with it) must bound every
    record: a record older than the batch's first one (a negative delta) sets it."""
    batch = build_batch(
        [Record(0, NOW, b"k", b"a"), Record(1, NOW - 5_000, b"k", b"b"), Record(2, NOW + 7, b"k", b"c")]
    )
    (pending,) = validate_batches(batch, max_message_bytes=1 << 20, log_append_time_ms=None, now_ms=NOW)
    assert (pending.min_timestamp, pending.max_timestamp) == (NOW - 5_000, NOW + 7)
    # LogAppendTime: every record reads as the append time
    (pending,) = validate_batches(batch, max_message_bytes=1 << 20, log_append_time_ms=NOW + 60, now_ms=NOW)
    assert (pending.min_timestamp, pending.max_timestamp) == (NOW + 60, NOW + 60)


# --- which record: Produce v8+ record_errors (KIP-467) --------------------------------------------


def bad_second_record() -> bytes:
    """Three records whose offset deltas are 0, 5, 2: the second one is wrong."""
    out = bytearray()
    for delta in (0, 5, 2):
        record_build._encode_record(out, delta, 0, b"k", b"v", ())
    buf = bytearray(batch_header.BATCH_HEADER_SIZE) + out
    batch_header._HEADER.pack_into(buf, 0, 0, len(buf) - 12, -1, 2, 0, 0, 2, NOW, NOW, -1, -1, -1, 3)
    return fix_crc(buf)


def _partition_answer(bootstrap: str, request: object) -> object:
    return send_request(bootstrap, request, timeout_s=30).parse().responses[0].partition_responses[0]


async def test_a_bad_record_is_named_by_its_batch_index_on_the_wire(agent):
    bootstrap = f"127.0.0.1:{agent.port}"
    answer = await asyncio.to_thread(
        _partition_answer, bootstrap, produce_request("lies", {0: bad_second_record()})
    )
    assert answer.error_code == ErrorCode.invalid_record
    assert [(int(e.batch_index), e.batch_index_error_message) for e in answer.record_errors] == [
        (1, "record 1 has offset delta 5, expected 1")
    ]
    assert "record 1 has offset delta 5, expected 1" in answer.error_message
    # a compacted topic names every keyless record, with Kafka's messages
    keyless = build_batch(
        [Record(0, NOW, b"k", b"a"), Record(1, NOW, None, b"b"), Record(2, NOW, None, b"c")]
    )
    answer = await asyncio.to_thread(_partition_answer, bootstrap, produce_request("compacted", {0: keyless}))
    assert answer.error_code == ErrorCode.invalid_record
    assert [(int(e.batch_index), e.batch_index_error_message) for e in answer.record_errors] == [
        (1, "Compacted topic cannot accept message without key"),
        (2, "Compacted topic cannot accept message without key"),
    ]
    assert answer.error_message.startswith("One or more records have been rejected due to 2 record errors")
    # a fault of the batch as a whole names no record
    answer = await asyncio.to_thread(
        _partition_answer, bootstrap, produce_request("lies", {0: gzip_garbage()})
    )
    assert answer.error_code == ErrorCode.corrupt_message and answer.record_errors == ()
    assert await asyncio.to_thread(_high_watermarks, bootstrap, "lies", range(1)) == [0]


async def test_produce_v7_gets_the_code_without_record_errors(agent):
    from kio.schema.produce.v7 import request as v7
    from kio.schema.types import TopicName
    from kio.static.primitive import Records, i16, i32, i32Timedelta

    request = v7.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=(
            v7.TopicProduceData(
                name=TopicName("lies"),
                partition_data=(
                    v7.PartitionProduceData(index=i32(0), records=Records.parse(bad_second_record())),
                ),
            ),
        ),
    )
    answer = await asyncio.to_thread(_partition_answer, f"127.0.0.1:{agent.port}", request)
    assert answer.error_code == ErrorCode.invalid_record
    assert not hasattr(answer, "record_errors")  # v7 has no such field; kio parsed every byte


def _confluent_keyless(bootstrap: str) -> list[object]:
    from confluent_kafka import Producer

    errors: list[object] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0})
    p.produce("compacted", b"no key", on_delivery=lambda err, _msg: errors.append(err))
    p.flush(30)
    return errors


def _kafka_python_keyless(bootstrap: str) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0)
    try:
        p.send("compacted", b"no key").get(timeout=30)
    finally:
        p.close(timeout=10)


async def test_real_clients_see_invalid_record(agent):
    from confluent_kafka import KafkaError
    from kafka import errors

    bootstrap = f"127.0.0.1:{agent.port}"
    (err,) = await asyncio.to_thread(_confluent_keyless, bootstrap)
    assert err is not None and err.code() == KafkaError.INVALID_RECORD
    with pytest.raises(errors.InvalidRecordError):
        await asyncio.to_thread(_kafka_python_keyless, bootstrap)
