"""Compacted topics' tables and table upkeep (compactor.tables_commit, tables_retention),
over real parts: `skiff agent` on a file:// bucket, the metadata HTTP service on SQLite in
this process, confluent-kafka producers, `skiff compact --once` as a subprocess or
`run_pass` in this process, the tables read back with pyiceberg and DuckDB.

- A compacted topic's table holds one row per (partition, key), its latest value, after
  updates and tombstones spread over several commits and two passes; the row is the
  record a consumer reads at that offset.
- A delete-policy topic's table with `skiff.table.snapshot.retention.ms=0` and many small
  commits: its small files are rewritten into one per Iceberg partition, every snapshot but
  the current expires, the files of the expired snapshots and of a crashed commit are
  deleted, no file a live snapshot needs is, and the table reads back whole.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from skiff.compactor import metrics
from skiff.compactor.runner import RunnerConfig, run_pass
from skiff.compactor.tables import TablesConfig
from skiff.compactor.tables_retention import live_files
from skiff.fileformat.objectstore import open_store
from skiff.fileformat.tables_layout import warehouse_for
from skiff.metadata.service import MetadataService
from skiff.metadata.wire.http_client import HttpMetadataClient

from tests.component.test_tables import (
    _consumed,
    _duckdb_rows,
    _load,
    _produce,
    _start,
    _table_rows,
)
from tests.e2e.test_compaction_cli import ShiftedClock, metadata_server  # noqa: F401 (fixture)
from tests.support.agents import SkiffProcess, skiff_command

Latest = dict[tuple[int, bytes], tuple[int, bytes]]  # (partition, key) -> (offset, value)


def _compact_once(metadata_url: str, bucket_url: str, db_url: str, *extra: str) -> dict[str, Any]:
    argv = ["compact", "--bucket", bucket_url, "--metadata", metadata_url, "--once", "--json"]
    done = subprocess.run(
        [*skiff_command(), *argv, "--table-catalog", db_url, *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert not out["tables_failed"], done.stderr
    return out


def _produce_versions(bootstrap: str, topic: str, round_: int, latest: Latest) -> None:
    """Keys k0..k29 over two partitions, three versions each; in round 1 every fifth key's
    last version is a tombstone. `latest` is kept as Kafka would compact it."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    delivered: list[tuple[int, int, bytes, bytes | None]] = []

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        delivered.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    for version in range(3):
        for i in range(30):
            tomb = round_ == 1 and version == 2 and i % 5 == 0
            value = None if tomb else f"r{round_}-v{version}-{i}".encode()
            producer.produce(topic, value, key=f"k{i}".encode(), partition=i % 2, on_delivery=on_delivery)
        assert producer.flush(30) == 0
    for p, offset, key, value in sorted(delivered):
        if value is None:
            latest.pop((p, key), None)
        else:
            latest[(p, key)] = (offset, value)


def _rows_by_key(arrow: Any) -> Latest:
    rows = arrow.to_pylist()
    out = {(r["partition"], r["key"]): (r["offset"], r["value"]) for r in rows}
    assert len(out) == len(rows), "a (partition, key) appears twice"
    return out


def test_compacted_topic_table_holds_latest_per_key(
    metadata_server: tuple[str, MetadataService, ShiftedClock],  # noqa: F811 (first: torn down after the agent)
    spawn_skiff: Callable[..., SkiffProcess],
    tmp_path: Path,
) -> None:
    metadata_url, _svc, _clock = metadata_server
    db_url = f"sqlite:///{tmp_path / 'm.db'}"
    bucket_url = f"file://{tmp_path / 'bucket'}"
    bootstrap = _start(spawn_skiff, metadata_url, bucket_url)
    topic = "profiles"
    config = {"skiff.table.enabled": "true", "cleanup.policy": "compact"}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1, config=config)])[topic].result(timeout=30)

    latest: Latest = {}
    _produce_versions(bootstrap, topic, 0, latest)
    _compact_once(metadata_url, bucket_url, db_url)
    assert _rows_by_key(_load(db_url, topic).scan().to_arrow()) == latest
    assert len(latest) == 30

    _produce_versions(bootstrap, topic, 1, latest)  # updates and tombstones of rows in the table
    _compact_once(metadata_url, bucket_url, db_url, "--table-max-commit-bytes", "1")  # several commits
    table = _load(db_url, topic)
    assert _rows_by_key(table.scan().to_arrow()) == latest
    assert len(latest) == 24  # six keys deleted by their tombstones
    assert {(p, k): (o, v) for p, o, _t, k, v, _h in _duckdb_rows(table.metadata_location)} == latest


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_retention_small_files_and_orphans(
    metadata_server: tuple[str, MetadataService, ShiftedClock],  # noqa: F811
    spawn_skiff: Callable[..., SkiffProcess],
    tmp_path: Path,
    anyio_backend: str,
) -> None:
    metadata_url, _svc, _clock = metadata_server
    db_url = f"sqlite:///{tmp_path / 'm.db'}"
    bucket_url = f"file://{tmp_path / 'bucket'}"
    bootstrap = _start(spawn_skiff, metadata_url, bucket_url)
    topic, partitions = "events", 3
    config = {"skiff.table.enabled": "true", "skiff.table.snapshot.retention.ms": "0"}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(timeout=30)
    _produce(bootstrap, topic, partitions)
    want = _consumed(bootstrap, topic, partitions)

    crashes: list[str] = []

    def crash_once(stage: str, name: str) -> None:
        if stage == "after_parquet" and not crashes:
            crashes.append(name)
            raise RuntimeError("killed after the Parquet write")

    base = TablesConfig(
        db_url, warehouse_for(bucket_url), max_commit_bytes=1, min_small_files=3, orphan_grace_ms=0
    )
    md = HttpMetadataClient(metadata_url)
    store = open_store(bucket_url)
    before = {m: metrics_value(m) for m in COUNTERS}
    try:
        for hook in (crash_once, None):  # a crashed pass leaves its commit's files; the next one ends the job
            tables = dataclasses.replace(base, hook=hook)
            await run_pass(
                md, store, RunnerConfig(tables=tables, retention=False, gc=False, expire_offsets=False)
            )
    finally:
        await md.close()
    assert crashes == [topic]

    table = _load(db_url, topic)
    assert _table_rows(table.scan().to_arrow()) == want
    assert _duckdb_rows(table.metadata_location) == want
    assert len(table.snapshots()) == 1  # every snapshot but the current expired
    # small files rewritten: one data file per Iceberg partition (unpartitioned: one)
    assert len(list(table.scan().plan_files())) == 1
    root = bucket_url + "/"
    live = {f.removeprefix(root) for f in live_files(table)}
    prefix = table.location().removeprefix(root)
    stored = {o.key for o in store.list(prefix)}
    assert live <= stored  # no file a live snapshot needs was deleted
    assert stored == live  # expired snapshots' and the crashed commit's files are gone
    after = {m: metrics_value(m) for m in before}
    assert all(after[m] > before[m] for m in before), (before, after)
    assert after["records"] - before["records"] == len(want)  # the crashed commit counted nothing
    assert after["commits"] - before["commits"] >= 3  # several small commits
    freshness = metrics.TABLE_RECORD_AGE.labels(topic)._value.get()
    assert 0 <= freshness < 4 * 86_400  # the newest record of the last commit: at most days old


COUNTERS = {
    "files_rewritten": metrics.TABLE_FILES_REWRITTEN,
    "snapshots_expired": metrics.TABLE_SNAPSHOTS_EXPIRED,
    "orphans_deleted": metrics.TABLE_ORPHANS,
    "records": metrics.TABLE_RECORDS,
    "commits": metrics.TABLE_COMMITS,
}


def metrics_value(name: str) -> float:
    return float(COUNTERS[name]._value.get())
