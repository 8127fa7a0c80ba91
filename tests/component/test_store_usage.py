"""Object-store usage reported to metadata (metadata.usage, metadata.wire.usage_report,
agent.usage_reporting): reports add up per role and minute and old minutes go; only the
token roles that speak for a role may report it; an agent's reports equal what its store
counted after a real client produced and fetched through it; each topic's share of the
agents' PUTs follows its bytes in each file; the console's overview and topics pages show it.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition
from skiff.agent.config import AgentConfig
from skiff.agent.runtime import start_agent
from skiff.agent.usage_reporting import UsageReporting
from skiff.fileformat.objectstore import StatsSnapshot, open_async_store, open_store
from skiff.fileformat.objectstore.pricing import Prices
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record
from skiff.fileformat.segment import ChunkInput, build_segment
from skiff.metadata.db import read_tx
from skiff.metadata.errors import MetadataUnavailable
from skiff.metadata.server.app import create_app
from skiff.metadata.server.auth import TokenTable
from skiff.metadata.server.cost_queries import topic_costs
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import BatchSpec, ChunkSpec, FileSpec, StoreUsage
from skiff.metadata.usage import KEEP_MS, MINUTE_MS
from skiff.metadata.wire.usage_report import UsageBook, report_sync, usage_of

from tests.support.metadata_fixtures import FakeClock

READER, AGENT, COMPACTOR = "r" * 24, "a" * 24, "c" * 24
TOKENS = f"reader:{READER}\nagent=agent-1:{AGENT}\ncompactor:{COMPACTOR}"


def test_reports_add_up_per_role_and_minute_and_old_minutes_go(
    metadata_service: MetadataService, clock: FakeClock
) -> None:
    usage = metadata_service.usage
    clock.now -= clock.now % MINUTE_MS  # at a minute's start
    start = clock.now
    metadata_service.report_agent_usage("agent-1", StoreUsage(puts=2, gets=5, bytes_out=100))
    metadata_service.report_agent_usage("agent-2", StoreUsage(puts=1, errors=1, bytes_out=50))
    metadata_service.report_reader_usage(StoreUsage(gets=7, heads=1, bytes_in=70))
    metadata_service.report_compactor_usage(StoreUsage())  # nothing asked: no row
    clock.advance(MINUTE_MS)
    metadata_service.report_compactor_usage(StoreUsage(lists=3, deletes=2))
    assert usage.usage_totals(start) == {
        "agent": StoreUsage(puts=3, gets=5, errors=1, bytes_out=150),
        "compactor": StoreUsage(lists=3, deletes=2),
        "reader": StoreUsage(gets=7, heads=1, bytes_in=70),
    }
    assert usage.usage_totals(start + MINUTE_MS) == {"compactor": StoreUsage(lists=3, deletes=2)}
    points = usage.usage_series(clock.now + 1, 2 * MINUTE_MS, MINUTE_MS)
    assert [(p.start_ms - start, p.role) for p in points] == [
        (0, "agent"),
        (0, "reader"),
        (MINUTE_MS, "compactor"),
    ]
    clock.advance(KEEP_MS + MINUTE_MS)  # both minutes are past what is kept: the next report prunes them
    metadata_service.report_reader_usage(StoreUsage(gets=1))
    assert usage.usage_totals(0) == {"reader": StoreUsage(gets=1)}


async def test_only_the_roles_that_speak_for_a_role_may_report_it(tmp_path: Path) -> None:
    svc = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    app = create_app(svc, tokens=TokenTable.parse(TOKENS, "test"), lag_sample_interval_ms=0)
    body = {"usage": {"gets": 1}}
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:

            async def post(path: str, token: str, payload: dict[str, object]) -> int:
                r = await http.post(path, json=payload, headers={"authorization": f"Bearer {token}"})
                return r.status_code

            assert await post("/v1/usage/reader", READER, body) == 200
            assert await post("/v1/usage/agent", READER, {"agent_id": "agent-1", **body}) == 403
            assert await post("/v1/usage/compactor", READER, body) == 403
            assert (
                await post("/v1/usage/agent", AGENT, {"agent_id": "agent-2", **body}) == 403
            )  # bound to agent-1
            assert await post("/v1/usage/agent", AGENT, {"agent_id": "agent-1", **body}) == 200
            assert await post("/v1/usage/compactor", AGENT, body) == 200  # an agent's compaction role
            assert await post("/v1/usage/compactor", COMPACTOR, body) == 200
            assert await post("/v1/usage/reader", COMPACTOR, body) == 403
            assert await post("/v1/usage/reader", READER, {"usage": {"gets": 2**33}}) == 422  # over the bound
        assert {r: u.gets for r, u in svc.usage.usage_totals(0).items()} == {
            "agent": 1,
            "compactor": 2,
            "reader": 1,
        }
    finally:
        svc.close()


def test_a_failed_report_is_kept_for_the_next_one() -> None:
    """The book moves only when the service took the report; kinds fold into the bill's classes."""
    counters = {
        "now": StatsSnapshot(requests={"put": 1, "create_if_absent": 1, "get_range": 3, "stream_get": 1})
    }
    book = UsageBook(lambda: counters["now"])
    sent: list[StoreUsage] = []

    def unreachable(u: StoreUsage) -> None:
        raise MetadataUnavailable("down")

    assert not report_sync(book, unreachable) and book.failures == 1
    counters["now"] = StatsSnapshot(
        requests={"put": 2, "create_if_absent": 1, "get_range": 3, "stream_get": 1}
    )
    assert report_sync(book, sent.append)
    assert sent == [StoreUsage(puts=3, gets=4)]
    assert report_sync(book, sent.append) and len(sent) == 1  # nothing new: nothing sent
    assert usage_of(StatsSnapshot(bytes_in=2**41)).bytes_in == 2**40  # capped at the bound


async def _produce_and_fetch(bootstrap: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i in range(5):
            await producer.send_and_wait("u", b"v%d" % i, partition=0)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=50)
    await consumer.start()
    try:
        consumer.assign([TopicPartition("u", 0)])
        consumer.seek(TopicPartition("u", 0), 0)
        got = 0
        while got < 5:
            batch = await consumer.getmany(timeout_ms=1000)
            got += sum(len(rs) for rs in batch.values())
    finally:
        await consumer.stop()


@pytest.mark.slow
async def test_an_agents_reports_equal_what_its_store_counted(tmp_path: Path) -> None:
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = LocalMetadataClient(service, owns_service=True)
    cfg = AgentConfig.from_env({}, agent_id="u1", host="127.0.0.1", port=0, flush_interval_ms=20)
    running = await start_agent(cfg, md, open_async_store(f"memory://usage-{uuid.uuid4().hex}"))
    reporting = UsageReporting(running, interval_ms=3_600_000)  # reports only when asked here
    try:
        await _produce_and_fetch(f"127.0.0.1:{running.server.port}")
        running.cache.clear()  # the next fetch reads the bucket again
        await reporting.report()
        counted = usage_of(running.store.stats.snapshot())
        assert counted.puts >= 1
        assert service.usage.usage_totals(0) == {"agent": counted}
        await reporting.report()  # nothing new since: the totals stay
        assert service.usage.usage_totals(0) == {"agent": counted}
    finally:
        await reporting.close()
        await running.close()


def _commit_file(svc: MetadataService, bucket: str, parts: dict[uuid.UUID, int]) -> int:
    """One agent file holding one batch per topic, of about `parts[topic]` bytes of value."""
    inputs, batches = [], {}
    for topic_id, size in parts.items():
        batch = build_batch([Record(0, 1_700_000_000_000, None, b"x" * size, ())])
        batches[topic_id] = batch
        inputs.append(ChunkInput(topic_id, 0, [batch], 1, 1))
    data, placements = build_segment(inputs)
    key = f"segments/cost-{uuid.uuid4().hex}.seg"
    store = open_store(bucket)
    store.put(key, data)
    store.close()
    specs = [  # the writer orders chunks by topic id
        ChunkSpec(
            p.topic_id,
            0,
            (BatchSpec(p.batch_positions[0], len(batches[p.topic_id]), 1, 1, 1_700_000_000_000),),
        )
        for p in placements
    ]
    results = svc.commit_file(FileSpec(key, len(data), writer="agent-1"), specs)
    assert all(r.error_code == 0 for r in results), results
    return len(data)


def test_each_topics_share_of_the_puts_follows_its_bytes_in_each_file(tmp_path: Path) -> None:
    bucket = f"file://{tmp_path / 'bucket'}"
    (tmp_path / "bucket").mkdir()
    svc = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}", bucket_url=bucket)
    try:
        big, small = svc.create_topic("big", 1, {}), svc.create_topic("small", 1, {})
        _commit_file(svc, bucket, {big.topic_id: 30_000, small.topic_id: 10_000})
        _commit_file(svc, bucket, {big.topic_id: 20_000})
        prices = Prices(write_per_1000_usd=1000.0, storage_gb_month_usd=0.0)  # one PUT = $1
        with read_tx(svc.engine) as conn:
            costs = {c.topic: c for c in topic_costs(conn, svc.clock(), prices)}
        assert list(costs) == ["big", "small"]  # most costly first
        assert costs["big"].put_share + costs["small"].put_share == pytest.approx(2.0, rel=0.01)
        assert costs["small"].put_share == pytest.approx(0.25, rel=0.02)  # 10 of ~40 KB of one file
        assert costs["big"].put_usd_per_hour == pytest.approx(1.75, rel=0.02)
        assert costs["big"].written_bytes > 50_000 and costs["small"].written_bytes > 10_000
    finally:
        svc.close()
