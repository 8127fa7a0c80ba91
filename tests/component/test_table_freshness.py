"""How far a topic's Iceberg table is behind (metadata.server.table_freshness): after the
materializer (compactor.tables) catches up, nothing is behind; records committed after it
are counted, and their age (the injected clock) is the table's freshness, in /metrics and on
the console's topic page."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from skiff.compactor.tables import TablesConfig, materialize_all
from skiff.fileformat.objectstore import open_store
from skiff.fileformat.tables_layout import warehouse_for
from skiff.metadata.server.app import create_app
from skiff.metadata.server.bucket import LazyBucket
from skiff.metadata.server.iceberg_rest import CatalogRows
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.server.table_freshness import TableFreshness
from skiff.metadata.service import MetadataService

from tests.component.test_console import HTML, cell, produce
from tests.support.metadata_fixtures import T0_MS, FakeClock
from tests.support.served_app import Served


async def test_behind_and_freshness_follow_the_materializer(tmp_path: Path) -> None:
    clock = FakeClock(T0_MS)
    db_url = f"sqlite:///{tmp_path / 'm.db'}"
    bucket = f"file://{tmp_path / 'bucket'}"
    (tmp_path / "bucket").mkdir()
    svc = MetadataService.from_url(db_url, bucket_url=bucket, clock=clock)
    md = LocalMetadataClient(svc)
    store = open_store(bucket)
    try:
        topic = svc.create_topic("orders.eu", 2, {"skiff.table.enabled": "true"})
        svc.create_topic("plain", 1, {})  # no table: not listed
        produce(svc, bucket, topic, 0, [b"a", b"b", b"c"])
        freshness = TableFreshness(CatalogRows(LazyBucket(svc)))
        (before,) = freshness.states(clock())
        assert (before.table, before.snapshot_ms, before.behind_offsets) == ("skiff.orders_eu", None, 3)

        summary = await materialize_all(md, store, TablesConfig(db_url, warehouse_for(bucket)))
        assert summary.records == 3
        (caught_up,) = freshness.states(clock())
        assert caught_up.behind_offsets == 0 and caught_up.freshness_s == 0.0
        assert caught_up.snapshot_ms is not None

        committed_at = clock()
        produce(svc, bucket, topic, 1, [b"d", b"e"])
        clock.advance(42_000)
        (behind,) = freshness.states(clock())
        assert behind.behind_offsets == 2 and behind.freshness_s == (clock() - committed_at) / 1000

        served = Served(create_app(svc, lag_sample_interval_ms=0))
        try:
            with httpx.Client(base_url=served.url()) as http:
                page = http.get("/console/topics/orders.eu", headers=HTML).text
                assert cell(page, "behind", 'data-table="skiff.orders_eu"') == "2"
                assert cell(page, "freshness", 'data-table="skiff.orders_eu"') == "42.0 s behind"
                samples = {
                    (s.name, tuple(s.labels.items())): s.value
                    for f in text_string_to_metric_families(http.get("/metrics").text)
                    for s in f.samples
                }
            assert samples[("skiff_table_behind_offsets", (("table", "skiff.orders_eu"),))] == 2
            assert samples[("skiff_table_freshness_seconds", (("table", "skiff.orders_eu"),))] == 42.0
        finally:
            served.close()
    finally:
        store.close()
        await md.close()
        svc.close()
