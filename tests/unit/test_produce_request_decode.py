"""agent.protocol.produce_request decodes Produce v3-v9 as the generic path does (the
schema walk, then kio): the same values for valid requests, MalformedRequest for the
same truncated and mutated ones."""

from __future__ import annotations

import datetime
import random
from typing import Any

import pytest
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta
from skiff.agent.protocol import (
    MalformedRequest,
    decode_request_body,
    encode_request,
    parse_request_header,
    request_schema,
)
from skiff.agent.protocol.produce_request import decode_produce_request
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record


def _request(
    version: int, txn: str | None, topics: list[tuple[str, list[tuple[int, bytes | None]]]]
) -> bytes:
    cls = request_schema(0, version)
    assert cls is not None
    mod = __import__(cls.__module__, fromlist=["TopicProduceData", "PartitionProduceData"])
    body = cls(
        transactional_id=txn,
        acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=30_000)),
        topic_data=tuple(
            mod.TopicProduceData(
                name=TopicName(name),
                partition_data=tuple(mod.PartitionProduceData(index=i32(i), records=r) for i, r in parts),
            )
            for name, parts in topics
        ),
    )
    return encode_request(body, correlation_id=7, client_id="rdkafka")[4:]


def _generic(frame: bytes) -> Any:
    header, offset = parse_request_header(frame)
    return decode_request_body(header, frame, offset)


def _fast(frame: bytes) -> Any:
    header, offset = parse_request_header(frame)
    return decode_produce_request(frame, offset, header.api_version)


def _values(body: Any) -> tuple[Any, ...]:
    return (
        body.transactional_id,
        int(body.acks),
        body.timeout,
        [(t.name, [(int(p.index), p.records) for p in t.partition_data]) for t in body.topic_data],
    )


def _outcome(decode: Any, frame: bytes) -> tuple[Any, ...] | str:
    try:
        return _values(decode(frame))
    except MalformedRequest:
        return "malformed"


_BATCH = build_batch([Record(0, 1_795_000_000_000, b"k", b"v" * 100, ())])
_REQUESTS = [
    (None, [("orders", [(0, _BATCH)])]),
    ("txn-é", [("a" * 300, [(3, _BATCH), (4, None), (5, b"")]), ("ünïcode", [])]),
    (None, []),
    (None, [("t", [(i, _BATCH) for i in range(20)]), ("u", [(0, b"x" * 200)])]),
]


@pytest.mark.parametrize("version", range(3, 10))
def test_valid_requests_decode_to_the_same_values(version: int) -> None:
    for txn, topics in _REQUESTS:
        frame = _request(version, txn, topics)
        assert _values(_fast(frame)) == _values(_generic(frame))
        assert _outcome(_fast, frame + b"\0\1\2") == _outcome(_generic, frame + b"\0\1\2")


@pytest.mark.parametrize("version", range(3, 10))
def test_truncated_requests_are_refused_by_both(version: int) -> None:
    for txn, topics in _REQUESTS:
        frame = _request(version, txn, topics)
        header_end = parse_request_header(frame)[1]
        for cut in range(header_end, len(frame)):
            assert _outcome(_fast, frame[:cut]) == _outcome(_generic, frame[:cut]) == "malformed", cut


@pytest.mark.parametrize("version", range(3, 10))
def test_mutated_requests_get_the_same_outcome(version: int) -> None:
    """Bytes of the body set to values that matter to lengths and null markers (0, 0xFF,
    0x80, 1, ...): both paths refuse the same requests and read the same values from the rest."""
    rng = random.Random(version)
    for txn, topics in _REQUESTS[:2]:
        frame = _request(version, txn, topics)
        header_end = parse_request_header(frame)[1]
        for pos in range(header_end, min(len(frame), header_end + 60)):
            for value in (0, 1, 2, 0x7F, 0x80, 0xFE, 0xFF, rng.randrange(256)):
                mutated = bytearray(frame)
                mutated[pos] = value
                data = bytes(mutated)
                assert _outcome(_fast, data) == _outcome(_generic, data), (pos, value)


def test_null_topic_array_and_names_are_refused() -> None:
    frame = _request(9, None, [("t", [(0, _BATCH)])])
    header_end = parse_request_header(frame)[1]
    topics_at = header_end + 1 + 6  # null transactional id, acks, timeout
    nulled = frame[:topics_at] + b"\0" + frame[topics_at + 1 :]
    with pytest.raises(MalformedRequest, match="non-nullable"):
        _fast(nulled)
