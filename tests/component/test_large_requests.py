"""One large request must not stall everyone: arrays over `agent.protocol.request_limits` are refused
before they are decoded, and a legitimate large request yields to the event loop, so a small
request on another connection is answered while it runs."""

from __future__ import annotations

import asyncio
import datetime
import itertools
import logging
import select
import socket
import struct
import threading
import uuid
from collections.abc import Iterator, Sequence

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.create_topics.v7.response import CreateTopicsResponse
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.describe_configs.v4.response import DescribeConfigsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta
from skiff.agent.handlers import create_topics as create_topics_handler
from skiff.agent.protocol import decode_response, encode_request
from skiff.metadata.errors import MetadataUnavailable
from skiff.metadata.types import NewTopic, Topic, TopicCreation

from tests.component.fake_metadata import AgentHarness, connect, is_closed, recv_frame, request_once

SMALL = ApiVersionsRequest(client_software_name="small", client_software_version="1")


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentHarness]:
    h = AgentHarness(tmp_path_factory.mktemp("large"), auto_create_topics=False).start()
    yield h
    h.stop()


def _still_serving(bootstrap: str) -> None:
    assert request_once(bootstrap, SMALL).error_code == ErrorCode.none


def _metadata(count: int) -> MetadataRequest:
    return MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(f"t{i}")) for i in range(count)),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def test_a_request_at_the_limit_is_served(harness):
    resp = request_once(harness.bootstrap, _metadata(10_000))
    assert len(resp.topics) == 10_000
    assert {t.error_code for t in resp.topics} == {ErrorCode.unknown_topic_or_partition}


def test_a_request_over_the_limit_closes_only_its_connection_with_a_warning(harness, caplog):
    errors_before = harness.agent.server.protocol_errors
    with (
        caplog.at_level(logging.INFO),
        connect(harness.bootstrap) as other,
        connect(harness.bootstrap) as sock,
    ):
        sock.sendall(encode_request(_metadata(10_001), 1))
        assert is_closed(sock)
        other.sendall(encode_request(SMALL, 2))
        assert decode_response(recv_frame(other), ApiVersionsResponse)[0] == 2
    assert harness.agent.server.protocol_errors == errors_before + 1
    (line,) = [r for r in caplog.records if "over the limit" in r.getMessage()]
    assert "MetadataRequest.topics has 10001 items, over the limit of 10000" in line.getMessage()
    assert line.levelno == logging.WARNING and line.exc_info is None


def test_a_huge_declared_count_is_refused_before_anything_is_walked(harness):
    """DescribeGroups v5 declaring 2 million ids in a 2 MB body: refused on the count alone."""
    header = struct.pack(">hhih", 15, 5, 9, -1) + b"\x00"
    count = 2_000_000 + 1  # compact array: count + 1, as an unsigned varint
    varint = bytearray()
    while count >= 0x80:
        varint.append((count & 0x7F) | 0x80)
        count >>= 7
    varint.append(count)
    body = bytes(varint) + b"\x02g" * 1_000_000
    with connect(harness.bootstrap) as sock:
        sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        assert is_closed(sock)
    _still_serving(harness.bootstrap)


class _Gate:
    """Wraps the harness's metadata `describe_topics`: answers at once, without suspending (as
    a cached lookup would), with made-up topics, and tells the test it was called."""

    def __init__(self, harness: AgentHarness) -> None:
        assert harness.metadata is not None
        self.metadata = harness.metadata
        self.original = harness.metadata.describe_topics
        self.called = threading.Event()

    async def describe_topics(self, names: Sequence[str]) -> dict[str, Topic]:
        self.called.set()
        return {n: Topic(n, uuid.uuid5(uuid.NAMESPACE_DNS, n), 1, {"retention.ms": "1000"}) for n in names}

    def __enter__(self) -> _Gate:
        self.metadata.describe_topics = self.describe_topics  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self.metadata.describe_topics = self.original  # type: ignore[method-assign]


def test_a_small_request_on_another_connection_is_answered_while_a_large_one_runs(harness):
    """Ordering, not timing: the small request is sent after the large one's handler started
    its work, and its answer must arrive while the large one is still being built."""
    big = DescribeConfigsRequest(
        resources=tuple(
            DescribeConfigsResource(resource_type=i8(2), resource_name=f"many-{i}", configuration_keys=None)
            for i in range(5_000)
        ),
        include_synonyms=True,
        include_documentation=True,
    )
    with _Gate(harness) as gate, connect(harness.bootstrap) as large, connect(harness.bootstrap) as small:
        large.sendall(encode_request(big, 1))
        assert gate.called.wait(30)
        small.sendall(encode_request(SMALL, 2))
        corr, resp = decode_response(recv_frame(small), ApiVersionsResponse)
        assert corr == 2 and resp.error_code == ErrorCode.none
        readable, _, _ = select.select([large], [], [], 0)
        assert not readable, "the large request was answered before the small one"
        corr, answer = decode_response(recv_frame(large), DescribeConfigsResponse)
        assert corr == 1 and len(answer.results) == 5_000
        assert {r.error_code for r in answer.results} == {ErrorCode.none}


def _pings_until_readable(bootstrap: str, large: socket.socket) -> int:
    """ApiVersions round trips on another connection until `large` has an answer to read: how
    many were answered while it had none."""
    answered = 0
    with connect(bootstrap) as small:
        for corr in itertools.count(100):
            if select.select([large], [], [], 0)[0]:
                return answered
            small.sendall(encode_request(SMALL, corr))
            got, resp = decode_response(recv_frame(small), ApiVersionsResponse)
            assert got == corr and resp.error_code == ErrorCode.none
            if not select.select([large], [], [], 0)[0]:
                answered += 1
    raise AssertionError("unreachable")


def test_other_connections_are_answered_while_a_10k_topic_describe_configs_is_encoded(harness):
    """Its answers are all built (the last topic cached), then the 26 MB response is encoded:
    pings on another connection are answered during the encoding, which yields to the loop."""
    n = 10_000
    big = DescribeConfigsRequest(
        resources=tuple(
            DescribeConfigsResource(resource_type=i8(2), resource_name=f"huge-{i}", configuration_keys=None)
            for i in range(n)
        ),
        include_synonyms=True,
        include_documentation=True,
    )
    server, topics = harness.agent.server, harness.agent.ctx.topics
    built = threading.Event()
    put, cached = topics.put, itertools.count(1)

    def counting_put(topic: Topic) -> None:
        put(topic)
        if next(cached) == n:
            built.set()

    sliced, yields = server.responses_encoded_sliced, server.encode_slice_yields
    topics.put = counting_put
    try:
        with _Gate(harness), connect(harness.bootstrap, timeout=120) as large:
            large.sendall(encode_request(big, 1))
            assert built.wait(60)
            answered = _pings_until_readable(harness.bootstrap, large)
            frame = recv_frame(large)
    finally:
        del topics.put
    assert struct.unpack_from(">i", frame)[0] == 1 and len(frame) > 20_000_000
    assert answered > 0
    assert server.responses_encoded_sliced == sliced + 1
    assert server.encode_slice_yields > yields


class _SlowCreates:
    """The harness's metadata creates: the first `passing` calls go through, the later ones wait
    until `release()` (then go through too), or fail once `fail()` was called."""

    def __init__(self, harness: AgentHarness, passing: int) -> None:
        assert harness.metadata is not None
        self.harness = harness
        self.metadata = harness.metadata
        self.passing = passing
        self.calls = 0
        self.released = asyncio.Event()  # used on the harness loop only
        self.failing = False

    async def _wait(self) -> None:
        self.calls += 1
        if self.calls > self.passing:
            await self.released.wait()
        if self.failing:
            raise MetadataUnavailable("test: stopped")

    async def create_topics(self, new: Sequence[NewTopic]) -> list[TopicCreation]:
        await self._wait()
        return await self.metadata.inner.create_topics(new)

    async def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> Topic:
        await self._wait()  # the one-by-one path of old: blocked alike
        return await self.metadata.inner.create_topic(name, partitions, configs)

    def release(self, fail: bool = False) -> None:
        def go() -> None:
            self.failing = fail
            self.released.set()

        self.harness.loop.call_soon_threadsafe(go)

    def __enter__(self) -> _SlowCreates:
        self.metadata.create_topics = self.create_topics  # type: ignore[method-assign]
        self.metadata.create_topic = self.create_topic  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        del self.metadata.create_topics, self.metadata.create_topic


def test_a_10k_topic_create_answers_at_its_timeout_and_creation_goes_on(harness):
    """One metadata call per batch of 500; the first batch is created, the second waits on a slow
    metadata: the answer comes at the request's timeout, REQUEST_TIMED_OUT for the 9,500 topics
    not confirmed, and the creation of all 10,000 completes later."""
    n = 10_000
    names = [f"made-{i}" for i in range(n)]
    request = CreateTopicsRequest(
        topics=tuple(
            CreatableTopic(
                name=TopicName(name),
                num_partitions=i32(1),
                replication_factor=i16(1),
                assignments=(),
                configs=(),
            )
            for name in names
        ),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=3)),
        validate_only=False,
    )
    with _SlowCreates(harness, passing=1) as slow:
        try:
            with connect(harness.bootstrap, timeout=60) as sock:
                sock.sendall(encode_request(request, 1))
                corr, resp = decode_response(recv_frame(sock), CreateTopicsResponse)
            assert slow.calls == 2  # the first batch, and the second one that waits
            assert corr == 1 and [t.name for t in resp.topics] == names
            codes = [t.error_code for t in resp.topics]
            assert codes == [ErrorCode.none] * 500 + [ErrorCode.request_timed_out] * 9_500
            assert "timeout of 3000 ms" in (resp.topics[-1].error_message or "")
            assert all(len(t.configs or ()) > 20 for t in resp.topics[:500])
        finally:
            slow.release(fail=slow.calls < 2)  # old code: stop its one-by-one creates
        pending = list(create_topics_handler._BACKGROUND)
        harness.call(asyncio.wait_for(asyncio.gather(*pending), 60))
    assert slow.calls == n // 500
    assert len(harness.call(harness.metadata.describe_topics(names))) == n
