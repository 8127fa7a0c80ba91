"""Malformed requests over real TCP get Kafka's answer, never a handler traceback: a null where
the schema says not nullable fails to parse (the connection closes, as Kafka's does), and
Metadata v10/v11 naming a topic by neither name nor id gets Kafka's error codes."""

from __future__ import annotations

import logging
import struct
import uuid
from collections.abc import Iterator

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from skiff.agent import protocol

from tests.component.fake_metadata import AgentHarness, connect, is_closed, request_once, roundtrip


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentHarness]:
    h = AgentHarness(tmp_path_factory.mktemp("malformed"), auto_create_topics=False).start()
    yield h
    h.stop()


def _still_serving(bootstrap: str) -> None:
    resp = request_once(bootstrap, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert resp.error_code == ErrorCode.none


# (api key, version, flexible?, body bytes with the first array null)
NULL_ARRAY_BODIES = [
    (15, 5, b"\x00" + b"\x00" + b"\x00"),  # DescribeGroups v5: groups null, include ops, tags
    (15, 0, b"\xff\xff\xff\xff"),  # DescribeGroups v0: groups null
    (32, 4, b"\x00" + b"\x00\x00" + b"\x00"),  # DescribeConfigs v4: resources null
    (42, 2, b"\x00" + b"\x00"),  # DeleteGroups v2: groups_names null
    (20, 6, b"\x00" + b"\x00\x00\x75\x30" + b"\x00"),  # DeleteTopics v6: topics null
    (19, 7, b"\x00" + b"\x00\x00\x75\x30" + b"\x00" + b"\x00"),  # CreateTopics v7: topics null
]


@pytest.mark.parametrize(("api_key", "version", "body"), NULL_ARRAY_BODIES)
def test_a_null_non_nullable_array_closes_the_connection_without_a_traceback(
    harness, caplog, api_key, version, body
):
    hv = protocol.request_header_version(api_key, version)
    header = struct.pack(">hhih", api_key, version, 5, -1) + (b"\x00" if hv >= 2 else b"")
    errors_before = harness.agent.server.protocol_errors
    with caplog.at_level(logging.INFO), connect(harness.bootstrap) as sock:
        sock.sendall(struct.pack(">i", len(header + body)) + header + body)
        assert is_closed(sock)
    assert harness.agent.server.protocol_errors == errors_before + 1
    refused = [r for r in caplog.records if "non-nullable field" in r.getMessage()]
    assert refused and all(r.levelno == logging.WARNING and r.exc_info is None for r in refused)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    _still_serving(harness.bootstrap)


def _metadata(topics: tuple[MetadataRequestTopic, ...], version: int):
    body = MetadataRequest(
        topics=topics, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    cls = protocol.request_schema(3, version)
    assert cls is not None
    return protocol.convert(body, cls)


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_v10_v11_with_neither_name_nor_id_gets_invalid_request_for_every_topic(harness, version):
    topics = (
        MetadataRequestTopic(topic_id=None, name=TopicName("some-topic")),
        MetadataRequestTopic(topic_id=None, name=None),
    )
    with connect(harness.bootstrap) as sock:
        resp = roundtrip(sock, _metadata(topics, version))
        assert [(t.name, t.error_code) for t in resp.topics] == [
            ("some-topic", ErrorCode.invalid_request),
            ("", ErrorCode.invalid_request),
        ]
        # the connection stays usable
        again = roundtrip(
            sock, _metadata((MetadataRequestTopic(topic_id=None, name=TopicName("x")),), version), 2
        )
        assert [(t.name, t.error_code) for t in again.topics] == [("x", ErrorCode.unknown_topic_or_partition)]


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_v10_v11_asking_by_id_gets_invalid_request(harness, version):
    tid = uuid.uuid4()
    resp = request_once(
        harness.bootstrap, _metadata((MetadataRequestTopic(topic_id=tid, name=None),), version)
    )
    assert [(t.name, t.error_code) for t in resp.topics] == [("", ErrorCode.invalid_request)]


def test_metadata_v12_with_neither_name_nor_id_gets_unknown_topic_id(harness):
    resp = request_once(harness.bootstrap, _metadata((MetadataRequestTopic(topic_id=None, name=None),), 12))
    assert [(t.name, t.error_code) for t in resp.topics] == [(None, ErrorCode.unknown_topic_id)]
