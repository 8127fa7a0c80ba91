"""The schema walk that runs before kio decodes a request (`agent.protocol.check_bounds`):
nulls where Kafka's schema says not nullable are refused, as Kafka's generated parsers refuse
them ("non-nullable field ... was serialized as null"), so that no handler ever sees None; and
arrays over `agent.protocol.request_limits` are refused on their declared count."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32, i64
from skiff.agent import protocol
from skiff.agent.handlers import default_registry
from skiff.agent.protocol import (
    MalformedRequest,
    RequestLimitExceeded,
    decode_request_body,
    encode_request,
    parse_request_header,
)
from skiff.agent.protocol.request_limits import LIMITS


def _decode(body: typing.Any) -> typing.Any:
    frame = encode_request(body, 7)[4:]
    header, offset = parse_request_header(frame)
    return decode_request_body(header, frame, offset)


def _non_nullable_top_level_arrays() -> list[tuple[str, int, str]]:
    """(api name, version, field) of every served request version's non-nullable array."""
    out = []
    for spec in default_registry().specs():
        for version in range(spec.min_version, spec.max_version + 1):
            cls = protocol.request_schema(spec.api_key, version)
            assert cls is not None
            for f in dataclasses.fields(cls):
                tp, optional = protocol._strip_optional(f.type)
                if typing.get_origin(tp) is tuple and not optional:
                    out.append((spec.name, version, f.name))
    return out


CASES = _non_nullable_top_level_arrays()


def test_there_are_many_non_nullable_arrays_to_check():
    assert len(CASES) > 50


@pytest.mark.parametrize(("api", "version", "field"), CASES)
def test_a_null_non_nullable_array_is_refused_at_the_schema_walk(api, version, field):
    spec = next(s for s in default_registry().specs() if s.name == api)
    cls = protocol.request_schema(spec.api_key, version)
    assert cls is not None
    body = dataclasses.replace(protocol.zero_entity(cls), **{field: None})  # kio writes None as null
    with pytest.raises(MalformedRequest, match=f"non-nullable field {cls.__name__}.{field} "):
        _decode(body)
    _decode(protocol.zero_entity(cls))  # the same request with an empty array parses


def test_a_null_nested_array_is_refused_too():
    body = ListOffsetsRequest(
        replica_id=i32(-1),  # type: ignore[arg-type]
        isolation_level=i8(0),
        topics=(ListOffsetsTopic(name=TopicName("t"), partitions=None),),  # type: ignore[arg-type]
    )
    with pytest.raises(MalformedRequest, match="ListOffsetsTopic.partitions"):
        _decode(body)


def test_nullable_arrays_and_strings_still_accept_null():
    all_topics = MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    assert _decode(all_topics).topics is None
    by_id = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=None),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    assert _decode(by_id).topics[0].name is None


def test_a_null_non_nullable_string_is_refused():
    body = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=TopicName("")),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    v9 = protocol.convert(body, protocol.request_schema(3, 9))  # names are nullable from v10 only
    frame = bytearray(encode_request(v9, 7)[4:])
    header, offset = parse_request_header(frame)
    assert frame[offset : offset + 2] == b"\x02\x01"  # one topic; its name "" (compact length 0 + 1)
    frame[offset + 1] = 0  # ... now null
    with pytest.raises(MalformedRequest, match="non-nullable field MetadataRequestTopic.name"):
        decode_request_body(header, frame, offset)


# --- array limits (agent.protocol.request_limits) ------------------------------------------------------


def _metadata(count: int) -> MetadataRequest:
    return MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(f"t{i}")) for i in range(count)),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def test_an_array_at_its_limit_parses_and_one_more_item_is_refused():
    assert len(_decode(_metadata(10_000)).topics) == 10_000
    with pytest.raises(
        RequestLimitExceeded, match="MetadataRequest.topics has 10001 items, over the limit of 10000"
    ):
        _decode(_metadata(10_001))


def test_limits_apply_to_nested_arrays():
    topic = ListOffsetsTopic(
        name=TopicName("t"),
        partitions=tuple(
            ListOffsetsPartition(partition_index=i32(p), current_leader_epoch=i32(-1), timestamp=i64(-1))
            for p in range(100_001)
        ),
    )
    body = ListOffsetsRequest(replica_id=i32(-1), isolation_level=i8(0), topics=(topic,))  # type: ignore[arg-type]
    with pytest.raises(RequestLimitExceeded, match="ListOffsetsTopic.partitions has 100001 items"):
        _decode(body)


def test_the_limit_is_checked_on_the_declared_count_before_any_item():
    """A count of 4 million with no items behind it is refused as over the limit, not walked."""
    frame = bytearray(encode_request(_metadata(0), 7)[4:])
    header, offset = parse_request_header(frame)
    assert frame[offset] == 1  # compact array of 0 topics
    frame[offset : offset + 1] = bytes([0x81, 0x92, 0xF4, 0x01])  # uvarint 4,000,001: 4 million topics
    with pytest.raises(RequestLimitExceeded, match="has 4000000 items"):
        decode_request_body(header, frame, offset)


def test_every_limit_names_an_array_of_a_served_request():
    served = set()
    for spec in default_registry().specs():
        for version in range(spec.min_version, spec.max_version + 1):
            stack = [protocol.request_schema(spec.api_key, version)]
            while stack:
                cls = stack.pop()
                for f in dataclasses.fields(cls):
                    tp, _ = protocol._strip_optional(f.type)
                    if typing.get_origin(tp) is tuple:
                        served.add((spec.api_key, cls.__name__, f.name))
                        tp, _ = protocol._strip_optional(typing.get_args(tp)[0])
                    if dataclasses.is_dataclass(tp):
                        stack.append(tp)
    assert set(LIMITS) <= served
