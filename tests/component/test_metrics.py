"""The agent's Prometheus metrics over real HTTP: produce, fetch cache, purgatories, groups."""

from __future__ import annotations

import asyncio
import urllib.request
import uuid
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from agent.config import AgentConfig
from agent.metrics import serve_metrics
from agent.runtime import start_agent
from fileformat.objectstore import open_async_store
from metadata.local_client import LocalMetadataClient
from metadata.service import MetadataService
from tests.support.agents import free_port


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_metrics_follow_produce_and_waiting_fetches(tmp_path: Path) -> None:
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = LocalMetadataClient(service, owns_service=True)
    cfg = AgentConfig.from_env({}, agent_id="m1", host="127.0.0.1", port=0, flush_interval_ms=20)
    running = await start_agent(cfg, md, open_async_store(f"memory://metrics-{uuid.uuid4().hex}"))
    port = free_port()
    serve_metrics(running, "127.0.0.1", port)
    bootstrap = f"127.0.0.1:{running.port}"
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=10_000)
    try:
        await md.create_topic("m", 1, {})
        await producer.start()
        await producer.send_and_wait("m", b"x" * 100)
        await consumer.start()
        consumer.assign([TopicPartition("m", 0)])
        consumer.seek(TopicPartition("m", 0), 1)
        pending = asyncio.ensure_future(consumer.getone())
        for _ in range(100):  # the consumer's fetch parks at the tail
            if running.watch.waiting:
                break
            await asyncio.sleep(0.05)
        m = await asyncio.to_thread(scrape, port)
        assert m[("skiff_produce_files_total", ())] >= 1
        assert m[("skiff_produce_file_bytes_total", ())] > 100
        assert m[("skiff_purgatory_delayed", (("purgatory", "fetch"),))] == 1
        assert m[("skiff_purgatory_delayed", (("purgatory", "heartbeat"),))] == 0
        assert m[("skiff_fetch_followed_partitions", ())] == 1
        assert m[("skiff_groups", ())] == 0
        assert m[("skiff_connections", ())] >= 2
        await producer.send_and_wait("m", b"y")
        assert (await asyncio.wait_for(pending, 10)).value == b"y"
    finally:
        await consumer.stop()
        await producer.stop()
        await running.close()
