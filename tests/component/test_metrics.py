"""The agent's Prometheus metrics over real HTTP: produce, fetch cache, purgatories, groups."""

from __future__ import annotations

import asyncio
import math
import urllib.request
import uuid
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition
from prometheus_client.parser import text_string_to_metric_families
from skiff.agent.config import AgentConfig
from skiff.agent.metrics import serve_metrics
from skiff.agent.runtime import RunningAgent, start_agent
from skiff.fileformat.objectstore import open_async_store
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService

from tests.support.agents import free_port
from tests.support.spies import parked_fetches


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def _agent_with_metrics(tmp_path: Path) -> tuple[RunningAgent, LocalMetadataClient, int]:
    """An agent in this process (metadata over SQLite, a memory bucket, files flushed after
    20 ms) serving its metrics; (the agent, its metadata client, the metrics port)."""
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = LocalMetadataClient(service, owns_service=True)
    cfg = AgentConfig.from_env({}, agent_id="m1", host="127.0.0.1", port=0, flush_interval_ms=20)
    running = await start_agent(cfg, md, open_async_store(f"memory://metrics-{uuid.uuid4().hex}"))
    port = free_port()
    serve_metrics(running, "127.0.0.1", port)
    return running, md, port


async def test_metrics_follow_produce_and_waiting_fetches(tmp_path: Path) -> None:
    running, md, port = await _agent_with_metrics(tmp_path)
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
        with parked_fetches(running.watch) as parkings:
            pending = asyncio.ensure_future(consumer.getone())
            # the consumer's fetch parks at the tail
            await asyncio.to_thread(parkings.wait_until, lambda: running.watch.waiting > 0)
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
        # the parked fetch was completed by the commit of b"y" (a wake), not by its max wait
        after = await asyncio.to_thread(scrape, port)
        for by, more in (("wake", 1), ("expiry", 0)):
            key = ("skiff_fetch_delayed_completed_total", (("by", by),))
            assert after[key] == m[key] + more, by
    finally:
        await consumer.stop()
        await producer.stop()
        await running.close()


# The produce buffer's stages, as agent.metrics documents them (agent.produce_buffer).
PRODUCE_STAGES = ("open", "queued", "put", "ordered", "commit", "resolve")


def _stages(m: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> dict[str, float]:
    """One sample per produce stage of the family `name` (KeyError: a stage not exported)."""
    return {stage: m[(name, (("stage", stage),))] for stage in PRODUCE_STAGES}


async def test_produce_stage_metrics_add_up_each_flushed_file(tmp_path: Path) -> None:
    """`skiff_produce_stage_seconds_total{stage}` sums every file's seconds in each stage and
    `skiff_produce_stage_max_seconds{stage}` keeps the longest: scraped before any file,
    then after each of two files (each produced, acknowledged and its flush task ended)."""
    running, md, port = await _agent_with_metrics(tmp_path)
    producer = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{running.port}")
    try:
        await md.create_topic("staged", 1, {})
        await producer.start()
        m = await asyncio.to_thread(scrape, port)
        totals = _stages(m, "skiff_produce_stage_seconds_total")
        assert totals == dict.fromkeys(PRODUCE_STAGES, 0.0)
        assert _stages(m, "skiff_produce_stage_max_seconds") == dict.fromkeys(PRODUCE_STAGES, 0.0)
        files = m[("skiff_produce_files_total", ())]
        assert m[("skiff_produce_post_seal_estimate_seconds", ())] == 0.0  # nothing learned yet
        for value in (b"first", b"second"):
            await producer.send_and_wait("staged", value)
            # the acknowledgement comes before the file's last stage (resolve) is counted:
            # flush() returns once every flush task, this file's included, has ended
            await running.buffer.flush()
            m = await asyncio.to_thread(scrape, port)
            assert m[("skiff_produce_files_total", ())] == files + 1  # exactly one more file
            files += 1
            after = _stages(m, "skiff_produce_stage_seconds_total")
            longest = _stages(m, "skiff_produce_stage_max_seconds")
            # the file's time went into the stages (its PUT and its commit took some)
            assert sum(after.values()) > sum(totals.values())
            for stage in PRODUCE_STAGES:
                share = after[stage] - totals[stage]  # this one file's seconds in the stage
                assert share >= 0, stage
                # the longest file took at least this one's share (`isclose`: the share is a
                # difference of float sums) and at most all files' seconds
                assert share <= longest[stage] or math.isclose(share, longest[stage]), stage
                assert longest[stage] <= after[stage], stage
            totals = after
            # the seal lead learned the files' seal -> commit time (put and commit took some)
            learned = m[("skiff_produce_post_seal_estimate_seconds", ())]
            assert (
                0.0
                < learned
                <= longest["queued"] + longest["put"] + longest["ordered"] + longest["commit"] + 1.0
            )
    finally:
        await producer.stop()
        await running.close()
