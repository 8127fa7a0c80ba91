"""The agent's Kafka protocol server over real TCP, with raw sockets: framing, versions, ordering,
back-pressure and robustness. Metadata is real (SQLite through LocalMetadataClient)."""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v1.request import ApiVersionsRequest as ApiVersionsRequestV1
from kio.schema.api_versions.v2.request import ApiVersionsRequest as ApiVersionsRequestV2
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v4.request import ApiVersionsRequest as ApiVersionsRequestV4
from kio.schema.create_topics.v7.request import CreateTopicsRequest
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_cluster.v1.response import DescribeClusterResponse
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.find_coordinator.v3.response import FindCoordinatorResponse
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.init_producer_id.v4.response import InitProducerIdResponse
from kio.schema.init_producer_id.v6.request import InitProducerIdRequest as InitProducerIdRequestV6
from kio.schema.init_producer_id.v6.response import InitProducerIdResponse as InitProducerIdResponseV6
from kio.schema.metadata.v0.request import MetadataRequest as MetadataRequestV0
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.types import BrokerId, ProducerId, TransactionalId
from kio.static.primitive import i8, i16, i32, i32Timedelta
from skiff.agent import protocol
from skiff.agent.context import AgentContext
from skiff.agent.handlers import NO_THROTTLE, HandlerRegistry, HandlerSpec, Request, default_registry
from skiff.agent.handlers._access import no_check
from skiff.agent.protocol import encode_request
from skiff.metadata.errors import MetadataError

from tests.component.fake_metadata import (
    AgentHarness,
    connect,
    is_closed,
    recv_frame,
    request_once,
    roundtrip,
)

ZERO = i32Timedelta.parse(datetime.timedelta(0))


def _api_versions(version: int) -> Any:
    return {
        0: ApiVersionsRequestV0(),
        1: ApiVersionsRequestV1(),
        2: ApiVersionsRequestV2(),
        3: ApiVersionsRequestV3(client_software_name="skiff-test", client_software_version="1.0"),
    }[version]


def _metadata_all() -> MetadataRequest:
    return MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )


def _still_serving(bootstrap: str) -> None:
    resp = request_once(bootstrap, _api_versions(3))
    assert resp.error_code == ErrorCode.none


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentHarness]:
    h = AgentHarness(tmp_path_factory.mktemp("proto")).start()
    yield h
    h.stop()


# --- a registry with test handlers ------------------------------------------------------------------
#
# FindCoordinator (10), an API whose requests run concurrently, is replaced by a scriptable
# handler: the request's key says what to do ("sleep:0.1", "none", "raise", "block",
# "metadata-error"); it answers with the correlation id as node id. DescribeCluster (60) is
# replaced by an exclusive handler and InitProducerId (22), an API whose requests run alone
# and in order, by one that sleeps for the transactional id's seconds: both record how they
# overlap with the others.


class Script:
    def __init__(self) -> None:
        self.started = 0
        self.running = 0
        self.max_running = 0
        self.overlapped_exclusive = False
        self.exclusive_running = False
        self.release: asyncio.Event | None = None
        self.ordered_started: list[int] = []
        self._started_changed: asyncio.Event | None = None

    async def wait_started(self, n: int) -> None:
        while self.started < n:
            self._started_changed = self._started_changed or asyncio.Event()
            self._started_changed.clear()
            await self._started_changed.wait()

    async def probe(self, ctx: AgentContext, request: Request) -> Any:
        command = request.body.key
        self.started += 1
        if self._started_changed is not None:
            self._started_changed.set()
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        if self.exclusive_running:
            self.overlapped_exclusive = True
        try:
            if command.startswith("sleep:"):
                await asyncio.sleep(float(command.split(":")[1]))
            elif command == "none":
                return None
            elif command == "raise":
                raise RuntimeError("scripted failure")
            elif command == "metadata-error":
                raise MetadataError(ErrorCode.invalid_config, "scripted metadata error")
            elif command.startswith("block"):
                if self.release is None:
                    self.release = asyncio.Event()
                await self.release.wait()
            return FindCoordinatorResponse(
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.none,
                error_message=None,
                node_id=BrokerId(request.correlation_id),
                host="",
                port=i32(0),
            )
        finally:
            self.running -= 1

    async def ordered(self, ctx: AgentContext, request: Request) -> Any:
        """Runs alone by the server's rule (no `exclusive` flag): records overlaps and order."""
        if self.running or self.exclusive_running:
            self.overlapped_exclusive = True
        self.exclusive_running = True
        self.ordered_started.append(request.correlation_id)
        try:
            await asyncio.sleep(float(request.body.transactional_id or 0))
            if self.running:
                self.overlapped_exclusive = True
        finally:
            self.exclusive_running = False
        return InitProducerIdResponse(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            producer_id=ProducerId(request.correlation_id),
            producer_epoch=i16(0),
        )

    async def exclusive(self, ctx: AgentContext, request: Request) -> Any:
        if self.running:
            self.overlapped_exclusive = True
        self.exclusive_running = True
        try:
            await asyncio.sleep(0.05)
            if self.running:
                self.overlapped_exclusive = True
        finally:
            self.exclusive_running = False
        return DescribeClusterResponse(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            cluster_id=str(request.correlation_id),
            controller_id=BrokerId(-1),
            brokers=(),
        )

    async def create_topics_raises(self, ctx: AgentContext, request: Request) -> Any:
        raise RuntimeError("no top-level error code to carry this")


def _scripted_registry(script: Script) -> HandlerRegistry:
    reg = default_registry()
    reg.register(
        HandlerSpec(10, 0, 4, script.probe, access=no_check("a scripted test handler")), replace=True
    )
    reg.register(
        HandlerSpec(22, 0, 5, script.ordered, access=no_check("a scripted test handler")), replace=True
    )
    reg.register(
        HandlerSpec(60, 0, 1, script.exclusive, exclusive=True, access=no_check("a scripted test handler")),
        replace=True,
    )
    reg.register(
        HandlerSpec(19, 2, 7, script.create_topics_raises, access=no_check("a scripted test handler")),
        replace=True,
    )
    return reg


@pytest.fixture()
def scripted(tmp_path) -> Iterator[tuple[AgentHarness, Script]]:
    script = Script()
    h = AgentHarness(tmp_path, max_inflight_requests=4).start(registry=_scripted_registry(script))
    yield h, script
    if script.release is not None:
        h.loop.call_soon_threadsafe(script.release.set)
    h.stop()


def _probe(command: str) -> FindCoordinatorRequest:
    return FindCoordinatorRequest(key=command, key_type=i8(0))


def _read_probe(sock: socket.socket) -> tuple[int, FindCoordinatorResponse]:
    return protocol.decode_response(recv_frame(sock), FindCoordinatorResponse)


def _ordered(seconds: float) -> InitProducerIdRequest:
    return InitProducerIdRequest(transactional_id=TransactionalId(str(seconds)), transaction_timeout=ZERO)


# --- ApiVersions ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_api_versions_answers_in_each_version_with_the_registry(harness, version):
    resp = request_once(harness.bootstrap, _api_versions(version))
    assert resp.__version__ == version and resp.error_code == ErrorCode.none
    advertised = {(k.api_key, k.min_version, k.max_version) for k in resp.api_keys}
    registry = harness.agent.server.registry
    assert advertised == {(s.api_key, s.min_version, s.max_version) for s in registry.specs()}
    assert (18, 0, 3) in advertised and (3, 1, 13) in advertised


@pytest.mark.parametrize("version", [4, 9])
def test_unsupported_api_versions_version_gets_v0_error_35_and_the_connection_stays(harness, version):
    with connect(harness.bootstrap) as sock:
        if version == 4:
            frame = encode_request(
                ApiVersionsRequestV4(client_software_name="x", client_software_version="1"), 5
            )
        else:  # a version kio does not know either: header v2, body unparseable to us
            frame = encode_request(_api_versions(3), 5, api_version=version)
        sock.sendall(frame)
        raw = recv_frame(sock)
        corr, resp = protocol.decode_response(raw, ApiVersionsResponseV0, header_version=0)
        assert corr == 5
        assert resp.error_code == ErrorCode.unsupported_version
        assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == [(18, 0, 3)]
        # the client then retries with a version we speak, on the same connection
        assert roundtrip(sock, _api_versions(3), correlation_id=6).error_code == ErrorCode.none


def test_api_versions_v3_rejects_an_invalid_software_name(harness):
    bad = ApiVersionsRequestV3(client_software_name="bad name!", client_software_version="1")
    assert request_once(harness.bootstrap, bad).error_code == ErrorCode.invalid_request


# --- versions and api keys ----------------------------------------------------------------------------


def test_unsupported_version_with_a_top_level_error_code_gets_error_35(harness):
    req = InitProducerIdRequestV6(transactional_id=None, transaction_timeout=ZERO)
    with connect(harness.bootstrap) as sock:
        sock.sendall(encode_request(req, 11))
        corr, resp = protocol.decode_response(recv_frame(sock), InitProducerIdResponseV6)
        assert corr == 11 and resp.error_code == ErrorCode.unsupported_version
        assert roundtrip(sock, _api_versions(0), correlation_id=12).error_code == ErrorCode.none


def test_unsupported_version_without_an_error_field_closes_the_connection(harness):
    with connect(harness.bootstrap) as sock:
        sock.sendall(encode_request(MetadataRequestV0(topics=()), 1))
        assert is_closed(sock)
    _still_serving(harness.bootstrap)


@pytest.mark.parametrize("api_key", [57, 1000, -1])
def test_unknown_or_unserved_api_key_closes_the_connection(harness, api_key):
    with connect(harness.bootstrap) as other, connect(harness.bootstrap) as sock:
        body = struct.pack(">hhih", api_key, 0, 1, -1) + b"\x00" * 8
        sock.sendall(struct.pack(">i", len(body)) + body)
        assert is_closed(sock)
        assert roundtrip(other, _api_versions(3)).error_code == ErrorCode.none


# --- framing robustness ---------------------------------------------------------------------------------


def test_truncated_frame_then_close(harness):
    with connect(harness.bootstrap) as other:
        with connect(harness.bootstrap) as sock:
            sock.sendall(struct.pack(">i", 100) + b"\x00\x12\x00\x03" + b"x" * 10)
        assert roundtrip(other, _api_versions(3)).error_code == ErrorCode.none
    _still_serving(harness.bootstrap)


def test_oversize_size_prefix_closes_at_once_without_reading(harness):
    server = harness.agent.server
    errors_before, read_timeouts_before = server.protocol_errors, server.request_read_timeouts
    with connect(harness.bootstrap) as other, connect(harness.bootstrap) as sock:
        sock.sendall(struct.pack(">i", 2**31 - 1) + b"\x00\x03\x00\x0c")  # claims 2 GiB, sends 4 bytes
        assert is_closed(sock)
        assert roundtrip(other, _api_versions(3)).error_code == ErrorCode.none
    # closed by the size check (a protocol error), not by waiting for the body until
    # request_read_timeout_ms ran out
    assert server.protocol_errors == errors_before + 1
    assert server.request_read_timeouts == read_timeouts_before


def test_request_just_above_the_limit_is_refused(tmp_path):
    h = AgentHarness(tmp_path, max_request_bytes=1024).start()
    try:
        with connect(h.bootstrap) as sock:
            sock.sendall(struct.pack(">i", 1025) + b"\x00" * 1025)
            assert is_closed(sock)
        with connect(h.bootstrap) as sock:  # at the limit is fine
            frame = encode_request(_api_versions(3), 1)
            padded = frame[4:] + b"\x00" * (1024 - len(frame) + 4)
            sock.sendall(struct.pack(">i", len(padded)) + padded)
            assert protocol.decode_response(
                recv_frame(sock), type(request_once(h.bootstrap, _api_versions(3)))
            )
    finally:
        h.stop()


@pytest.mark.parametrize("size", [-1, -(2**31), 0, 3, 7])
def test_negative_or_tiny_sizes_close_the_connection(harness, size):
    with connect(harness.bootstrap) as sock:
        sock.sendall(struct.pack(">i", size) + b"\x00" * max(size, 0))
        assert is_closed(sock)
    _still_serving(harness.bootstrap)


def test_garbage_body_closes_only_that_connection_after_answering_earlier_requests(harness):
    with connect(harness.bootstrap) as other, connect(harness.bootstrap) as sock:
        good = encode_request(_api_versions(3), 1)
        header = struct.pack(">hhih", 3, 12, 2, 3) + b"abc" + b"\x00"
        garbage = header + b"\xff\xff\xff\xff\x0f" + bytes(range(40))
        sock.sendall(good + struct.pack(">i", len(garbage)) + garbage + encode_request(_api_versions(3), 3))
        # the first request is answered, then the connection closes (the third is never read)
        raw = recv_frame(sock)
        assert struct.unpack(">i", raw[:4])[0] == 1
        assert is_closed(sock)
        assert roundtrip(other, _metadata_all()).brokers


def test_hostile_array_length_does_not_take_the_agent_down(harness):
    """kio alone would try to allocate ~35 GB for this body and abort the process."""
    with connect(harness.bootstrap) as sock:
        header = struct.pack(">hhih", 3, 12, 1, -1) + b"\x00"
        body = bytes.fromhex("91d8cdc3101e7ec27378a661c935187c")
        sock.sendall(struct.pack(">i", len(header + body)) + header + body)
        assert is_closed(sock)
    _still_serving(harness.bootstrap)


def test_random_garbage_for_every_served_api_never_kills_the_agent(harness):
    rng = random.Random(1234)
    specs = harness.agent.server.registry.specs()
    for i in range(300):
        spec = rng.choice(specs)
        version = rng.randint(spec.min_version, spec.max_version)
        hv = protocol.request_header_version(spec.api_key, version)
        header = struct.pack(">hhi", spec.api_key, version, i) + (struct.pack(">h", -1) if hv >= 1 else b"")
        header += b"\x00" if hv >= 2 else b""
        body = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 48)))
        with connect(harness.bootstrap) as sock:
            sock.sendall(struct.pack(">i", len(header + body)) + header + body)
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(5)
            while sock.recv(65536):  # an answer (if the bytes happened to parse) or a close
                pass
    _still_serving(harness.bootstrap)


def test_client_half_close_still_gets_its_answers(harness):
    with connect(harness.bootstrap) as sock:
        sock.sendall(encode_request(_api_versions(3), 1) + encode_request(_metadata_all(), 2))
        sock.shutdown(socket.SHUT_WR)
        assert struct.unpack(">i", recv_frame(sock)[:4])[0] == 1
        assert struct.unpack(">i", recv_frame(sock)[:4])[0] == 2
        assert is_closed(sock)


def test_idle_connections_are_closed(tmp_path):
    h = AgentHarness(tmp_path, connections_max_idle_ms=300).start()
    try:
        with connect(h.bootstrap) as sock:
            assert roundtrip(sock, _api_versions(3)).error_code == ErrorCode.none
            started = time.monotonic()
            assert is_closed(sock, timeout=5)
            assert 0.2 < time.monotonic() - started < 3
    finally:
        h.stop()


def test_closing_the_server_drops_its_connections(tmp_path):
    h = AgentHarness(tmp_path).start()
    sock = connect(h.bootstrap)
    try:
        assert roundtrip(sock, _api_versions(3)).error_code == ErrorCode.none
        assert h.agent.server.connection_count == 1
        h.call(h.agent.server.close())
        assert is_closed(sock)
    finally:
        sock.close()
        h.stop()


# --- pipelining, ordering, back-pressure ------------------------------------------------------------------


def test_pipelined_requests_are_answered_in_order_while_handlers_run_concurrently(scripted):
    h, script = scripted
    rng = random.Random(7)
    delays = [rng.choice([0.0, 0.01, 0.05, 0.1]) for _ in range(24)]
    with connect(h.bootstrap) as sock:
        sock.sendall(b"".join(encode_request(_probe(f"sleep:{d}"), 100 + i) for i, d in enumerate(delays)))
        for i in range(len(delays)):
            corr, resp = _read_probe(sock)
            assert corr == 100 + i and resp.node_id == 100 + i
    # the handlers overlapped (counted by the script, not timed) but never more than
    # max_inflight_requests ran at once
    assert 1 < script.max_running <= 4


def test_mixed_apis_pipelined_keep_their_order(harness):
    reqs = [_api_versions(3), _metadata_all(), _api_versions(0), _metadata_all(), _api_versions(1)]
    with connect(harness.bootstrap) as sock:
        sock.sendall(b"".join(encode_request(r, 50 + i) for i, r in enumerate(reqs)))
        for i, r in enumerate(reqs):
            cls = protocol.response_schema(int(r.__api_key__), int(r.__version__))
            assert cls is not None
            corr, resp = protocol.decode_response(recv_frame(sock), cls)
            assert corr == 50 + i and resp.__version__ == r.__version__


def test_a_handler_returning_none_sends_nothing(scripted):
    h, _ = scripted
    with connect(h.bootstrap) as sock:
        sock.sendall(
            encode_request(_probe("sleep:0.05"), 1)
            + encode_request(_probe("none"), 2)
            + encode_request(_probe("x"), 3)
        )
        assert _read_probe(sock)[0] == 1
        assert _read_probe(sock)[0] == 3


def test_back_pressure_bounds_requests_in_flight_per_connection(scripted):
    h, script = scripted
    with connect(h.bootstrap) as sock:
        sock.sendall(b"".join(encode_request(_probe("block"), i) for i in range(10)))
        time.sleep(0.5)
        assert script.started == 4  # max_inflight_requests: the rest wait unread in the socket
        assert h.agent.server.connection_count == 1
        h.loop.call_soon_threadsafe(lambda: script.release.set())
        assert [_read_probe(sock)[0] for _ in range(10)] == list(range(10))
    assert script.started == 10


def test_handler_exceptions_become_error_responses_or_a_close(scripted):
    h, _ = scripted
    with connect(h.bootstrap) as sock:
        sock.sendall(encode_request(_probe("raise"), 1) + encode_request(_probe("metadata-error"), 2))
        assert _read_probe(sock)[1].error_code == ErrorCode.unknown_server_error
        assert _read_probe(sock)[1].error_code == ErrorCode.invalid_config
    with connect(h.bootstrap) as sock:
        sock.sendall(encode_request(CreateTopicsRequest(topics=(), timeout=ZERO, validate_only=False), 1))
        assert is_closed(sock)
    _still_serving(h.bootstrap)


def test_exclusive_handlers_run_alone_and_in_order(scripted):
    h, script = scripted
    cluster = DescribeClusterRequest(include_cluster_authorized_operations=False)
    reqs = [
        _probe("sleep:0.05"),
        cluster,
        _probe("sleep:0.02"),
        _probe("sleep:0.0"),
        cluster,
        _probe("sleep:0.01"),
    ]
    with connect(h.bootstrap) as sock:
        sock.sendall(b"".join(encode_request(r, i) for i, r in enumerate(reqs)))
        for i, r in enumerate(reqs):
            cls = FindCoordinatorResponse if r is not cluster else DescribeClusterResponse
            corr, _ = protocol.decode_response(recv_frame(sock), cls)
            assert corr == i
    assert not script.overlapped_exclusive


def test_state_changing_requests_run_alone_in_the_order_sent(scripted):
    """InitProducerId (like OffsetCommit, JoinGroup, CreateTopics, ...) runs alone by the
    server's rule: after every earlier request of its connection, before any later one;
    the requests around it still overlap each other."""
    h, script = scripted
    reqs = [
        _probe("sleep:0.05"),
        _ordered(0.03),
        _probe("sleep:0.02"),
        _probe("sleep:0.02"),
        _ordered(0.0),
        _ordered(0.02),
        _probe("sleep:0.01"),
    ]
    with connect(h.bootstrap) as sock:
        sock.sendall(b"".join(encode_request(r, i) for i, r in enumerate(reqs)))
        for i, r in enumerate(reqs):
            cls = InitProducerIdResponse if isinstance(r, InitProducerIdRequest) else FindCoordinatorResponse
            corr, _ = protocol.decode_response(recv_frame(sock), cls)
            assert corr == i
    assert not script.overlapped_exclusive
    assert script.ordered_started == [1, 4, 5]
    assert script.max_running == 2  # requests 2 and 3 ran together


def test_closing_the_server_with_handlers_running_gives_every_byte_back(scripted, caplog):
    h, script = scripted
    server = h.agent.server
    with connect(h.bootstrap) as sock:
        sock.sendall(b"".join(encode_request(_probe("block"), i) for i in range(3)))
        h.call(script.wait_started(3))
        assert server.request_budget.used > 0 and server.connection_held_bytes > 0
        h.call(server.close())
        assert server.request_budget.used == 0 and server.connection_held_bytes == 0
        assert is_closed(sock)
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


def test_the_agent_wide_request_bound_mutes_every_connection(tmp_path):
    """queued_max_request_bytes: 40 KiB requests against a 64 KiB bound, on two connections:
    one runs, the others wait unread until its bytes are given back."""
    script = Script()
    h = AgentHarness(tmp_path, queued_max_request_bytes=64 * 1024).start(registry=_scripted_registry(script))
    server = h.agent.server
    big = _probe("block" + "-" * 40_000)
    try:
        with connect(h.bootstrap) as a, connect(h.bootstrap) as b:
            a.sendall(encode_request(big, 1) + encode_request(big, 2))
            b.sendall(encode_request(big, 3))
            h.call(_until(lambda: server.muted_connections == 2))
            assert script.started == 1
            assert 40_000 < server.request_budget.used < 64 * 1024
            h.loop.call_soon_threadsafe(lambda: script.release.set())
            assert [_read_probe(a)[0], _read_probe(a)[0], _read_probe(b)[0]] == [1, 2, 3]
        assert script.started == 3
        h.call(_until(lambda: server.request_budget.used == 0))
    finally:
        h.stop()


def test_many_connections_at_once(harness):
    errors: list[BaseException] = []

    def client(n: int) -> None:
        try:
            with connect(harness.bootstrap) as sock:
                for i in range(5):
                    assert roundtrip(sock, _metadata_all(), correlation_id=n * 10 + i).brokers
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors


def test_a_connection_with_many_buffered_requests_lets_the_loop_turn(harness):
    """Requests already in the socket buffer are read without suspending; the reader yields
    every `_READ_BURST_REQUESTS` so that other connections, timers and the commit thread get
    the loop (before: all 300 were parsed and dispatched in one loop iteration)."""
    from skiff.agent.network.connection import _READ_BURST_REQUESTS

    server = harness.agent.server
    most_between_turns = 0
    stop = asyncio.Event()

    async def watch() -> None:
        nonlocal most_between_turns
        seen = sum(server.requests.values())
        while not stop.is_set():
            await asyncio.sleep(0)  # one turn per loop iteration
            now = sum(server.requests.values())
            most_between_turns = max(most_between_turns, now - seen)
            seen = now

    watcher = asyncio.run_coroutine_threadsafe(watch(), harness.loop)
    n = 300
    with connect(harness.bootstrap) as sock:
        sock.sendall(b"".join(encode_request(_api_versions(3), i) for i in range(n)))  # ~12 KB at once
        for i in range(n):
            assert protocol.decode_response(recv_frame(sock), protocol.response_schema(18, 3))[0] == i
    harness.loop.call_soon_threadsafe(stop.set)
    watcher.result(10)
    assert 0 < most_between_turns <= _READ_BURST_REQUESTS
