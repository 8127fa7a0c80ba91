"""The agent's histograms (agent.metrics) move when a real Kafka client produces and
fetches: produce ack latency by acks, fetch latency, object-store request latency by
operation, metadata call latency by operation, file size and records per file. The
histograms belong to the process (several agents in one test process share them), so
the test compares scrapes taken before and after."""

from __future__ import annotations

import asyncio
import time
import urllib.request
import uuid
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition
from prometheus_client.parser import text_string_to_metric_families
from skiff.agent.config import AgentConfig
from skiff.agent.metrics import serve_metrics
from skiff.agent.runtime import start_agent
from skiff.fileformat.objectstore import open_async_store
from skiff.metadata.errors import MetadataUnavailable
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.wire.http_client import HttpMetadataClient
from skiff.metadata.wire.operations import OPERATIONS

from tests.support.agents import free_port

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
RECORDS = 5


def scrape(port: int) -> tuple[Samples, dict[str, str]]:
    """Every sample by (name, labels), and every family's type by name."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    families = list(text_string_to_metric_families(text))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}
    return samples, {f.name: f.type for f in families}


def _moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


async def _produce(bootstrap: str, acks: int | str, timestamp_ms: int | None = None) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=acks)
    await producer.start()
    try:
        for i in range(RECORDS):
            await producer.send_and_wait("h", b"v%d" % i, partition=0, timestamp_ms=timestamp_ms)
    finally:
        await producer.stop()


async def _fetch_all(bootstrap: str) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=50)
    await consumer.start()
    try:
        consumer.assign([TopicPartition("h", 0)])
        consumer.seek(TopicPartition("h", 0), 0)
        got: list[bytes] = []
        while len(got) < 2 * RECORDS:
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 10)
            got += [r.value for records in batch.values() for r in records if r.value is not None]
        return got
    finally:
        await consumer.stop()


@pytest.mark.slow
async def test_histograms_follow_produce_and_fetch(tmp_path: Path) -> None:
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = LocalMetadataClient(service, owns_service=True)
    cfg = AgentConfig.from_env({}, agent_id="h1", host="127.0.0.1", port=0, flush_interval_ms=20)
    running = await start_agent(cfg, md, open_async_store(f"memory://histograms-{uuid.uuid4().hex}"))
    port = free_port()
    serve_metrics(running, "127.0.0.1", port)
    bootstrap = f"127.0.0.1:{running.port}"
    try:
        await md.create_topic("h", 1, {})
        before, _ = await asyncio.to_thread(scrape, port)
        await _produce(bootstrap, 1)
        # records stamped two minutes ago: their append latency lands above the 60 s bucket
        await _produce(bootstrap, "all", timestamp_ms=int(time.time() * 1000) - 120_000)
        assert len(await _fetch_all(bootstrap)) == 2 * RECORDS
        after, types = await asyncio.to_thread(scrape, port)
    finally:
        await running.close()

    for name in (
        "skiff_produce_ack_latency_seconds",
        "skiff_fetch_latency_seconds",
        "skiff_object_store_request_duration_seconds",
        "skiff_metadata_call_duration_seconds",
        "skiff_produce_file_size_bytes",
        "skiff_produce_file_records",
        "skiff_produce_append_latency_seconds",
    ):
        assert types[name] == "histogram", name
    assert _moved(before, after, "skiff_produce_ack_latency_seconds_count", acks="1") == RECORDS
    assert _moved(before, after, "skiff_produce_ack_latency_seconds_count", acks="all") == RECORDS
    assert _moved(before, after, "skiff_fetch_latency_seconds_count") >= 1
    # one observation per CreateTime batch (aiokafka sends each record as its own batch)
    assert _moved(before, after, "skiff_produce_append_latency_seconds_count") == 2 * RECORDS
    assert _moved(before, after, "skiff_produce_append_latency_seconds_bucket", le="60.0") == RECORDS
    assert _moved(before, after, "skiff_produce_append_latency_seconds_bucket", le="300.0") == 2 * RECORDS
    files = _moved(before, after, "skiff_produce_files_total")
    assert files >= 2  # every send waited for its ack: at least one file per producer
    assert _moved(before, after, "skiff_produce_file_size_bytes_count") == files
    assert _moved(before, after, "skiff_produce_file_records_count") == files
    assert _moved(before, after, "skiff_produce_file_records_sum") == 2 * RECORDS
    assert _moved(before, after, "skiff_produce_file_size_bytes_sum") == _moved(
        before, after, "skiff_produce_file_bytes_total"
    )
    puts = _moved(before, after, "skiff_object_store_requests_total", role="agent", kind="put")
    assert puts >= files
    assert _moved(before, after, "skiff_object_store_request_duration_seconds_count", operation="put") == puts
    # the start-up readiness probe's GET (the fetches above were answered from the range cache)
    assert after[("skiff_object_store_request_duration_seconds_count", (("operation", "get"),))] >= 1
    commits = _moved(before, after, "skiff_metadata_call_duration_seconds_count", operation="commit_file")
    assert commits == files
    # every label value is a declared operation name: a bounded set
    ops = {dict(labels)["operation"] for name, labels in after if name.startswith("skiff_metadata_call_")}
    assert ops and ops <= set(OPERATIONS)


async def test_the_http_client_tells_each_operation_and_its_duration() -> None:
    """`HttpMetadataClient.call`, the one point every operation goes through, reports the
    operation's name and duration to `observe_call`, failed calls included."""

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/agents"):
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, content=b"[]")

    seen: list[tuple[str, float]] = []
    client = HttpMetadataClient("http://x", transport=httpx.MockTransport(answer))
    client.observe_call = lambda op, seconds: seen.append((op, seconds))
    try:
        assert await client.list_topics() == []
        with pytest.raises(MetadataUnavailable):
            await client.live_agents()
    finally:
        await client.close()
    assert [op for op, _ in seen] == ["list_topics", "live_agents"]
    assert all(seconds >= 0 for _, seconds in seen)
