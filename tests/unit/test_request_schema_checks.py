"""The schema walk that runs before kio decodes a request (`agent.protocol.check_bounds`):
nulls where Kafka's schema says not nullable are refused, as Kafka's generated parsers refuse
them ("non-nullable field ... was serialized as null"), so that no handler ever sees None."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from kio.schema.list_offsets.v7.request import ListOffsetsRequest, ListOffsetsTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32

from agent import protocol
from agent.handlers import default_registry
from agent.protocol import MalformedRequest, decode_request_body, encode_request, parse_request_header


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
