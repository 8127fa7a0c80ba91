"""`encode_response_sliced` writes exactly the bytes `encode_response` writes (converting to the
wire version on the way), and gives the loop a turn when a slice has run its time."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from typing import Any

import pytest
from kio.schema.describe_configs.v1.response import DescribeConfigsResponse as DescribeConfigsV1
from kio.schema.describe_configs.v4.response import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v11.response import FetchResponse as FetchV11
from kio.schema.fetch.v16.response import (
    FetchableTopicResponse,
    FetchResponse,
    NodeEndpoint,
    PartitionData,
)
from kio.schema.metadata.v5.response import MetadataResponse as MetadataV5
from kio.schema.metadata.v12.response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64
from skiff.agent.handlers import NO_THROTTLE
from skiff.agent.protocol import convert, encode_response
from skiff.agent.protocol.sliced_encode import encode_cost, encode_response_sliced


def _describe_configs(topics: int) -> DescribeConfigsResponse:
    return DescribeConfigsResponse(
        throttle_time=NO_THROTTLE,
        results=tuple(
            DescribeConfigsResult(
                error_code=ErrorCode.none if t % 7 else ErrorCode.unknown_topic_or_partition,
                error_message=None if t % 7 else "nope",
                resource_type=i8(2),
                resource_name=f"topic-{t}",
                configs=tuple(
                    DescribeConfigsResourceResult(
                        name=f"c{c}",
                        value=None if c == 3 else str(c),
                        read_only=False,
                        config_source=i8(5),
                        is_sensitive=False,
                        synonyms=(DescribeConfigsSynonym(name=f"log.c{c}", value="1", source=i8(5)),),
                        config_type=i8(3),
                        documentation="doc" if c % 2 else None,
                    )
                    for c in range(5)
                ),
            )
            for t in range(topics)
        ),
    )


def _metadata(topics: int, partitions: int) -> MetadataResponse:
    return MetadataResponse(
        throttle_time=NO_THROTTLE,
        brokers=(MetadataResponseBroker(node_id=BrokerId(1), host="h", port=i32(9092), rack=None),),
        cluster_id="c",
        controller_id=BrokerId(1),
        topics=tuple(
            MetadataResponseTopic(
                error_code=ErrorCode.none,
                name=TopicName(f"t{t}"),
                topic_id=uuid.UUID(int=t + 1),
                is_internal=False,
                partitions=tuple(
                    MetadataResponsePartition(
                        error_code=ErrorCode.none,
                        partition_index=i32(p),
                        leader_id=BrokerId(1),
                        leader_epoch=i32(0),
                        replica_nodes=(BrokerId(1),),
                        isr_nodes=(BrokerId(1),),
                        offline_replicas=(),
                    )
                    for p in range(partitions)
                ),
                topic_authorized_operations=i32(-2147483648),
            )
            for t in range(topics)
        ),
    )


def _fetch(partitions: int) -> FetchResponse:
    return FetchResponse(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=i32(0),
        responses=(
            FetchableTopicResponse(
                topic_id=uuid.UUID(int=5),
                partitions=tuple(
                    PartitionData(
                        partition_index=i32(p),
                        error_code=ErrorCode.none,
                        high_watermark=i64(10),
                        last_stable_offset=i64(10),
                        log_start_offset=i64(0),
                        aborted_transactions=None,
                        preferred_read_replica=BrokerId(-1),
                        records=b"x" * (p % 3),
                    )
                    for p in range(partitions)
                ),
            ),
        ),
        node_endpoints=(NodeEndpoint(node_id=BrokerId(1), host="h", port=i32(9092), rack=None),),
    )


def _sliced(response: Any, wire: type[Any] | None = None, slice_s: float = 0.0) -> tuple[bytearray, int]:
    ticks = itertools.count()  # a clock that moves one second per reading: every item ends a slice
    return asyncio.run(
        encode_response_sliced(7, response, wire, slice_s=slice_s, clock=lambda: float(next(ticks)))
    )


@pytest.mark.parametrize(
    ("response", "wire"),
    [
        (_describe_configs(50), None),
        (_describe_configs(50), DescribeConfigsV1),
        (_describe_configs(1), None),
        (_describe_configs(0), None),
        (_metadata(20, 3), None),
        (_metadata(20, 3), MetadataV5),
        (_metadata(1, 3_000), None),  # one large item: written in slices itself
        (_fetch(3_000), None),  # tagged fields at the top level (node endpoints)
        (_fetch(40), FetchV11),
    ],
)
def test_same_bytes_as_encode_response(response, wire):
    expected = encode_response(7, response if wire is None else convert(response, wire))
    frame, _ = _sliced(response, wire)
    assert bytes(frame) == bytes(expected)


def test_the_loop_gets_a_turn_between_slices_of_a_large_array():
    response = _describe_configs(100)
    _, yields = _sliced(response, slice_s=0.5)  # the clock moves 1 s per reading: every item
    assert yields >= 100
    _, yields = asyncio.run(encode_response_sliced(7, response, slice_s=3600.0))
    assert yields == 0


def test_nested_large_items_yield_too():
    _, yields = _sliced(_metadata(1, 3_000), slice_s=0.5)
    assert yields >= 3_000


def test_cost_estimate_counts_entities_through_first_items():
    assert encode_cost(_describe_configs(10)) == 1 + 10 * (1 + 5 * 2)
    assert encode_cost(_metadata(4, 3)) == 1 + 1 + 4 * (1 + 3)


def test_shared_entities_are_encoded_once_and_written_everywhere():
    base = _describe_configs(3)
    shared = base.results[1].configs
    response = DescribeConfigsResponse(
        throttle_time=NO_THROTTLE,
        results=tuple(
            DescribeConfigsResult(
                error_code=ErrorCode.none,
                error_message=None,
                resource_type=i8(2),
                resource_name=f"t{t}",
                configs=(*shared, *base.results[2].configs[t % 5 :]),
            )
            for t in range(300)
        ),
    )
    for wire in (None, DescribeConfigsV1):
        expected = encode_response(7, response if wire is None else convert(response, wire))
        assert bytes(_sliced(response, wire)[0]) == bytes(expected)
