"""Topics as Iceberg tables (compactor.tables), over real parts: `skiff agent` on a file://
bucket, the metadata HTTP service on SQLite in this process, confluent-kafka producers
(plain, a committed and an aborted transaction), `skiff compact --once` as a subprocess,
and the table read back with pyiceberg's SQL catalog over the metadata database and with
DuckDB's iceberg extension.

- The table holds exactly what a read_committed consumer reads (partition, offset,
  timestamp, key, value, headers), nothing aborted; the snapshot records the offsets it
  covers; a second pass adds nothing and makes no snapshot.
- A materializer that dies after writing a commit's Parquet files and before the commit
  (an injected failure, on the second of several commits) leaves no duplicate and no gap:
  the next pass writes each record exactly once (the catalog on SQLite and on PostgreSQL).
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from skiff.compactor.runner import RunnerConfig, run_pass
from skiff.compactor.tables import TablesConfig
from skiff.fileformat.objectstore import open_store
from skiff.fileformat.tables_layout import OFFSETS_PROPERTY, warehouse_for
from skiff.metadata.service import MetadataService
from skiff.metadata.wire.http_client import HttpMetadataClient

from tests.e2e.test_compaction_cli import ShiftedClock, metadata_server  # noqa: F401 (fixture)
from tests.support.agents import SkiffProcess, agent_args, skiff_command
from tests.support.txn_clients import read_to_end

DEADLINE_S = 60.0
DAY_MS = 86_400_000
BASE_MS = (int(time.time() * 1000) // DAY_MS - 3) * DAY_MS  # three days, inside retention.ms
Row = tuple[int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def _start(spawn: Callable[..., SkiffProcess], metadata_url: str, bucket_url: str) -> str:
    agent = spawn(
        *agent_args(bucket_url, metadata_url),
        env={"SKIFF_FLUSH_INTERVAL_MS": "20", "SKIFF_CHUNK_CACHE_TTL_MS": "1"},
    )
    return agent.bootstrap


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    config = {"skiff.table.enabled": "true", "skiff.table.partition.spec": "day(timestamp)"}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(timeout=30)


def _produce(bootstrap: str, topic: str, partitions: int) -> None:
    """Plain records over three days (some with null keys, values and headers), then a
    committed and an aborted transaction on every partition."""
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(60):
        key = None if i % 7 == 0 else f"k{i}".encode()
        value = None if i % 11 == 0 else f"v{i}".encode() * (i % 5 + 1)
        headers = [("h", f"x{i}".encode()), ("n", None)] if i % 3 == 0 else None
        ts = BASE_MS + (i % 3) * DAY_MS + i
        plain.produce(topic, value, key=key, partition=i % partitions, headers=headers, timestamp=ts)
        if i % 20 == 19:
            assert plain.flush(30) == 0
    assert plain.flush(30) == 0
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4()}", "linger.ms": 5})
    tx.init_transactions(30)
    for outcome in ("commit", "abort"):
        tx.begin_transaction()
        for p in range(partitions):
            for j in range(3):
                tx.produce(topic, f"{outcome}-{p}-{j}".encode(), key=b"t", partition=p)
        assert tx.flush(30) == 0
        if outcome == "commit":
            tx.commit_transaction(30)
        else:
            tx.abort_transaction(30)


def _consumed(bootstrap: str, topic: str, partitions: int) -> list[Row]:
    messages, _ends = read_to_end(bootstrap, topic, "read_committed", partitions, DEADLINE_S)
    return sorted(
        (m.partition(), m.offset(), m.timestamp()[1], m.key(), m.value(), tuple(m.headers() or ()))
        for m in messages
    )


def _table_rows(arrow: Any) -> list[Row]:
    return sorted(
        (
            r["partition"],
            r["offset"],
            int(r["timestamp"].timestamp() * 1000),
            r["key"],
            r["value"],
            tuple((h["key"], h["value"]) for h in r["headers"] or ()),
        )
        for r in arrow.to_pylist()
    )


def _load(db_url: str, topic: str) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("skiff", uri=db_url)
    try:
        return catalog.load_table(f"skiff.{topic}")  # scans read the files, not the catalog
    finally:
        catalog.engine.dispose()


def _compact_once(metadata_url: str, bucket_url: str, db_url: str) -> dict[str, Any]:
    argv = ["compact", "--bucket", bucket_url, "--metadata", metadata_url, "--once", "--json"]
    done = subprocess.run(
        [*skiff_command(), *argv, "--table-catalog", db_url], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert not out["tables_failed"], done.stderr
    return out


def _duckdb_rows(metadata_location: str) -> list[Row]:
    """The table as DuckDB's iceberg extension reads it (with the avro one it needs, both
    from their PyPI packages: no download)."""
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    con = duckdb.connect(
        config={"allow_unsigned_extensions": "true", "autoinstall_known_extensions": "false"}
    )
    for package, name in ((duckdb_extension_avro, "avro"), (duckdb_extension_iceberg, "iceberg")):
        assert package.__file__ is not None
        (ext,) = Path(package.__file__).parent.glob(f"extensions/*/{name}.duckdb_extension")
        con.execute(f"LOAD '{ext}'")
    path = metadata_location.removeprefix("file://")
    arrow = con.execute(f"SELECT * FROM iceberg_scan('{path}')").to_arrow_table()
    return _table_rows(arrow)


def test_topic_table_end_to_end(
    metadata_server: tuple[str, MetadataService, ShiftedClock],  # noqa: F811 (first: torn down after the agent)
    spawn_skiff: Callable[..., SkiffProcess],
    tmp_path: Path,
) -> None:
    metadata_url, _svc, _clock = metadata_server
    db_url = f"sqlite:///{tmp_path / 'm.db'}"
    bucket_url = f"file://{tmp_path / 'bucket'}"
    bootstrap = _start(spawn_skiff, metadata_url, bucket_url)
    topic, partitions = "orders", 3
    _create(bootstrap, topic, partitions)
    _produce(bootstrap, topic, partitions)
    want = _consumed(bootstrap, topic, partitions)
    assert len(want) == 60 + 3 * partitions  # the aborted records are not there

    first = _compact_once(metadata_url, bucket_url, db_url)
    assert (first["table_records"], first["tables_failed"]) == (len(want), 0)
    table = _load(db_url, topic)
    assert _table_rows(table.scan().to_arrow()) == want
    offsets = json.loads(table.current_snapshot().summary.additional_properties[OFFSETS_PROPERTY])
    ends = {str(p): max(o for q, o, *_ in want if q == p) + 1 for p in range(partitions)}
    assert all(offsets[p] >= ends[p] for p in ends)  # past the last record (a marker may follow)
    assert [f.name for f in table.spec().fields] == ["timestamp_day"]
    assert (tmp_path / "bucket" / "tables").is_dir()

    snapshots = len(table.snapshots())
    again = _compact_once(metadata_url, bucket_url, db_url)
    assert again["table_records"] == 0
    table = _load(db_url, topic)
    assert len(table.snapshots()) == snapshots
    assert _table_rows(table.scan().to_arrow()) == want

    assert _duckdb_rows(table.metadata_location) == want


class _Crash(RuntimeError):
    pass


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("catalog", ["sqlite", "postgresql"])
async def test_crash_between_parquet_write_and_commit(
    metadata_server: tuple[str, MetadataService, ShiftedClock],  # noqa: F811
    spawn_skiff: Callable[..., SkiffProcess],
    tmp_path: Path,
    anyio_backend: str,
    catalog: str,
    request: pytest.FixtureRequest,
) -> None:
    """The catalog in the metadata's SQLite database, or in a PostgreSQL one."""
    metadata_url, _svc, _clock = metadata_server
    db_url = (
        f"sqlite:///{tmp_path / 'm.db'}" if catalog == "sqlite" else str(request.getfixturevalue("pg_url"))
    )
    bucket_url = f"file://{tmp_path / 'bucket'}"
    bootstrap = _start(spawn_skiff, metadata_url, bucket_url)
    topic, partitions = "crashy", 3
    _create(bootstrap, topic, partitions)
    _produce(bootstrap, topic, partitions)
    want = _consumed(bootstrap, topic, partitions)

    calls: list[str] = []

    def crash_on_second(stage: str, name: str) -> None:
        if stage != "after_parquet":
            return
        calls.append(name)
        if len(calls) == 2:
            raise _Crash("killed between the Parquet write and the snapshot commit")

    # max_commit_bytes 1: each commit covers one answer of find_chunks, so there are several
    tables = TablesConfig(db_url, warehouse_for(bucket_url), max_commit_bytes=1, hook=crash_on_second)
    config = RunnerConfig(tables=tables, retention=False, gc=False, expire_offsets=False)
    md = HttpMetadataClient(metadata_url)
    store = open_store(bucket_url)
    try:
        crashed = await run_pass(md, store, config)
        assert crashed.tables_failed == 1
        partial = _table_rows(_load(db_url, topic).scan().to_arrow())
        assert 0 < len(partial) < len(want) and set(partial) <= set(want)
        config = RunnerConfig(tables=TablesConfig(db_url, warehouse_for(bucket_url), max_commit_bytes=1))
        config = RunnerConfig(tables=config.tables, retention=False, gc=False, expire_offsets=False)
        done = await run_pass(md, store, config)
        assert done.tables_failed == 0
        assert done.table_records == len(want) - len(partial)
        assert _table_rows(_load(db_url, topic).scan().to_arrow()) == want
    finally:
        await md.close()
