"""agent.protocol.produce_response writes exactly kio's bytes for Produce responses v3-v9."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.response import (
    BatchIndexAndErrorMessage,
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from kio.static.primitive import i32, i32Timedelta, i64
from skiff.agent.handlers.produce import _partition_response
from skiff.agent.protocol import convert, encode_response, produce_response, response_schema
from skiff.agent.protocol.produce_response import (
    encode_any_answers,
    encode_produce_answers,
    encode_produce_response,
)


def _responses() -> list[ProduceResponse]:
    # the handler's answers (index, code, base_offset, log_append_time_ms, log_start_offset,
    # message, record_errors) as the kio entities its awaiting path returns
    ok = _partition_response((7, 0, 123_456_789_012, -1, 5, None, ()))
    appended = _partition_response((0, 0, 0, 1_795_505_728_233, 0, None, ()))
    failed = _partition_response(
        (3, ErrorCode.corrupt_message.value, -1, -1, -1, "fails its CRC-32C check: é", ())
    )
    with_record_errors = PartitionProduceResponse(
        index=i32(1),
        error_code=ErrorCode.invalid_record,
        base_offset=i64(-1),
        log_append_time=None,
        log_start_offset=i64(-1),
        record_errors=(
            BatchIndexAndErrorMessage(batch_index=i32(0), batch_index_error_message="bad"),
            BatchIndexAndErrorMessage(batch_index=i32(2), batch_index_error_message=None),
        ),
        error_message=None,
    )
    throttle = i32Timedelta.parse(datetime.timedelta(milliseconds=250))
    return [
        ProduceResponse(
            responses=(TopicProduceResponse(name="t", partition_responses=(ok,)),), throttle_time=throttle
        ),
        ProduceResponse(
            responses=(
                TopicProduceResponse(name="a" * 200, partition_responses=(ok, appended, failed)),
                TopicProduceResponse(name="b.c-d_e", partition_responses=(with_record_errors,)),
                TopicProduceResponse(name="empty", partition_responses=()),
            ),
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        ),
        ProduceResponse(responses=(), throttle_time=throttle),
        # one partition of one topic: the encoder's shortcut (a cached prefix and a struct)
        ProduceResponse(
            responses=(TopicProduceResponse(name="é" * 70, partition_responses=(appended,)),),
            throttle_time=throttle,
        ),
        ProduceResponse(
            responses=(TopicProduceResponse(name="t", partition_responses=(failed,)),), throttle_time=throttle
        ),
    ]


@pytest.mark.parametrize("version", range(3, 10))
def test_the_bytes_are_kios_at_every_version(version: int) -> None:
    target = response_schema(0, version)
    assert target is not None
    for response in _responses():
        expected = encode_response(99, response if version == 9 else convert(response, target))
        assert encode_produce_response(99, version, response) == expected


def test_versions_outside_the_range_are_refused() -> None:
    with pytest.raises(ValueError):
        encode_produce_response(1, 2, _responses()[0])


@pytest.mark.parametrize("version", range(3, 10))
def test_the_one_partition_shortcut_writes_the_general_bytes(version: int) -> None:
    answers = [
        (0, 0, 0, -1, 0, None, ()),
        (2**31 - 1, 0, 2**63 - 1, 1_795_505_728_233, 2**62, None, ()),
        (5, 6, -1, -1, -1, None, ()),  # an error code without a message
        (1, 87, -1, -1, -1, "x", ((0, "bad"),)),  # a message and record errors: not the shortcut
    ]
    for name in ("t", "a" * 127, "b" * 128, "ü" * 300):
        for answer in answers:
            for throttle_ms in (0, 250):
                topics = [(name, [answer])]
                assert encode_produce_answers(7, version, topics, throttle_ms) == encode_any_answers(
                    7, version, topics, throttle_ms
                )


def test_the_shortcuts_prefix_cache_is_bounded() -> None:
    for i in range(produce_response._ONE_PREFIXES_MAX + 10):
        encode_produce_answers(1, 9, [(f"topic-{i}", [(0, 0, 0, -1, 0, None, ())])])
    assert 0 < len(produce_response._ONE_PREFIXES) <= produce_response._ONE_PREFIXES_MAX
