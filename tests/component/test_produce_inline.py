"""Produce's synchronous path (agent.handlers.produce_inline.start_inline) over real TCP: it is the
path ordinary requests take, it answers as the awaiting path does, and a request on it never
overtakes an earlier request of its connection that is still on the awaiting path."""

from __future__ import annotations

import asyncio
import datetime
import struct
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta
from skiff.agent.config import AgentConfig
from skiff.agent.runtime import RunningAgent, start_agent
from skiff.fileformat.batch_header import iter_batches
from skiff.fileformat.objectstore import open_async_store
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record, decode_records
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService

from tests.support.kafka_wire import KafkaWire, encode_request, fetch_request, produce_request, send_request


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[RunningAgent]:
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = LocalMetadataClient(service, owns_service=True)
    store = open_async_store(f"memory://inline-{uuid.uuid4().hex}")
    cfg = AgentConfig.from_env({}, agent_id="a1", host="127.0.0.1", port=0, flush_interval_ms=20)
    running = await start_agent(cfg, md, store)
    await md.create_topic("warm", 1, {})
    await md.create_topic("cold", 1, {})
    try:
        yield running
    finally:
        await running.close()


def _batch(value: bytes) -> bytes:
    return build_batch([Record(0, int(time.time() * 1000), b"k", value)])


def _values(bootstrap: str, topic: str) -> list[bytes]:
    """The first record's value of each batch stored in partition 0, in offset order."""
    req = fetch_request(topic, [(0, 0, 1 << 20)], max_bytes=1 << 20)
    records = bytes(
        send_request(bootstrap, req, timeout_s=30).parse().responses[0].partitions[0].records or b""
    )
    return [decode_records(records, pos)[0].value or b"" for pos, _ in iter_batches(records)]


def _two_topics(first: str, second: str, value: bytes) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=tuple(
            TopicProduceData(
                name=TopicName(t),
                partition_data=(PartitionProduceData(index=i32(0), records=Records.parse(_batch(value))),),
            )
            for t in (first, second)
        ),
    )


def _pipeline(bootstrap: str, requests: list[ProduceRequest]) -> list[int]:
    """Send all requests in one write, then read their answers: their correlation ids, in order."""
    with KafkaWire(bootstrap, timeout_s=30) as wire:
        wire.send_frame(b"".join(encode_request(r, correlation_id=i) for i, r in enumerate(requests, 1)))
        return [struct.unpack_from(">i", wire.recv_frame())[0] for _ in requests]


async def test_ordinary_requests_take_the_synchronous_path(agent):
    bootstrap = f"127.0.0.1:{agent.port}"
    first = await asyncio.to_thread(send_request, bootstrap, produce_request("warm", {0: _batch(b"a")}))
    assert first.parse().responses[0].partition_responses[0].error_code == ErrorCode.none
    before = agent.server.produce_inline
    answers = [
        (await asyncio.to_thread(send_request, bootstrap, produce_request("warm", {0: _batch(b"b%d" % i)})))
        .parse()
        .responses[0]
        .partition_responses[0]
        for i in range(3)
    ]
    assert agent.server.produce_inline == before + 3
    assert [int(a.error_code) for a in answers] == [0, 0, 0]
    assert [int(a.base_offset) for a in answers] == [1, 2, 3]
    # refusals are answered on it as well, with the same codes
    bad = await asyncio.to_thread(send_request, bootstrap, produce_request("warm", {5: _batch(b"x")}))
    assert bad.parse().responses[0].partition_responses[0].error_code == ErrorCode.unknown_topic_or_partition
    assert agent.server.produce_inline == before + 4
    assert await asyncio.to_thread(_values, bootstrap, "warm") == [b"a", b"b0", b"b1", b"b2"]


async def test_a_request_never_overtakes_an_earlier_one_still_waiting(agent):
    """Request 1 names a topic not in the topic cache (the awaiting path: a metadata load);
    request 2, pipelined behind it, names only a cached topic and could be appended at once.
    Both write to "warm": request 1's batch must come first."""
    bootstrap = f"127.0.0.1:{agent.port}"
    await asyncio.to_thread(send_request, bootstrap, produce_request("warm", {0: _batch(b"first")}))
    inline_before = agent.server.produce_inline
    correlation_ids = await asyncio.to_thread(
        _pipeline,
        bootstrap,
        [_two_topics("cold", "warm", b"one"), _two_topics("warm", "warm", b"two")],
    )
    assert correlation_ids == [1, 2]
    assert agent.server.produce_inline == inline_before  # the second one waited for the first
    assert await asyncio.to_thread(_values, bootstrap, "warm") == [b"first", b"one", b"two", b"two"]


def _acks0_then_acked(bootstrap: str) -> int:
    with KafkaWire(bootstrap, timeout_s=30) as wire:
        wire.send_only(produce_request("warm", {0: _batch(b"unacked")}, acks=0))
        answer = wire.request(produce_request("warm", {0: _batch(b"acked")})).parse()
        return int(answer.responses[0].partition_responses[0].base_offset)


async def test_acks_0_is_stored_unanswered_on_the_synchronous_path(agent):
    bootstrap = f"127.0.0.1:{agent.port}"
    await asyncio.to_thread(send_request, bootstrap, produce_request("warm", {0: _batch(b"first")}))
    before = agent.server.produce_inline
    assert await asyncio.to_thread(_acks0_then_acked, bootstrap) == 2
    assert agent.server.produce_inline == before + 2
    assert await asyncio.to_thread(_values, bootstrap, "warm") == [b"first", b"unacked", b"acked"]
