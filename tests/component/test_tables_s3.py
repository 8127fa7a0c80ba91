"""A topic's Iceberg table with its warehouse on a real HTTP S3 server (moto's), the path AWS
takes: a `skiff agent` writing to an s3:// bucket, confluent-kafka producers (plain records,
a committed and an aborted transaction), `skiff compact --once` as a subprocess whose only
S3 settings are the standard AWS variables (pyiceberg's S3 FileIO gets endpoint and
credentials through fileformat.tables_layout.catalog_properties), and the table read back by
pyiceberg from the same bucket.

- The table holds exactly what a read_committed consumer reads.
- Its data and metadata files are objects under `<bucket>/tables/skiff/<table>/` (listed
  with boto3, independently of pyiceberg), and every data file the snapshot names is one.
- A second pass adds nothing and commits no snapshot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from skiff.fileformat.tables_layout import CATALOG_NAME, NAMESPACE, catalog_properties, warehouse_for
from skiff.metadata.service import MetadataService

from tests.component.test_tables import _compact_once, _consumed, _create, _produce, _table_rows
from tests.e2e.test_compaction_cli import ShiftedClock, metadata_server  # noqa: F401 (fixture)
from tests.support.agents import SkiffProcess, agent_args
from tests.support.s3servers import S3Bucket


def _load_s3(db_url: str, bucket_url: str, topic: str) -> Any:
    """The table through pyiceberg's SQL catalog with the S3 FileIO the materializer uses."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(CATALOG_NAME, **catalog_properties(db_url, warehouse_for(bucket_url)))
    try:
        return catalog.load_table((NAMESPACE, topic))
    finally:
        catalog.engine.dispose()


def test_table_warehouse_on_s3(
    metadata_server: tuple[str, MetadataService, ShiftedClock],  # noqa: F811 (first: torn down after the agent)
    spawn_skiff: Callable[..., SkiffProcess],
    moto_s3: S3Bucket,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:
    moto_s3.setenv(monkeypatch)  # the standard AWS settings, for the subprocesses and pyiceberg here
    metadata_url, _svc, _clock = metadata_server
    bucket_url = moto_s3.url("data")
    db_url = f"sqlite:///{tmp_path / 'catalog.db'}"
    agent = spawn_skiff(
        *agent_args(bucket_url, metadata_url),
        env={**moto_s3.env, "SKIFF_FLUSH_INTERVAL_MS": "20", "SKIFF_CHUNK_CACHE_TTL_MS": "1"},
    )
    topic, partitions = "orders", 2
    _create(agent.bootstrap, topic, partitions)
    _produce(agent.bootstrap, topic, partitions)
    want = _consumed(agent.bootstrap, topic, partitions)
    assert len(want) == 60 + 3 * partitions  # the aborted records are not there

    first = _compact_once(metadata_url, bucket_url, db_url)
    assert first["table_records"] == len(want)
    table = _load_s3(db_url, bucket_url, topic)
    assert table.metadata_location.startswith(f"s3://{moto_s3.name}/data/tables/skiff/{topic}/metadata/")
    assert _table_rows(table.scan().to_arrow()) == want

    listed = moto_s3.client().list_objects_v2(Bucket=moto_s3.name, Prefix=f"data/tables/skiff/{topic}/")
    keys = {o["Key"] for o in listed.get("Contents", [])}
    data_files = {t.file.file_path for t in table.scan().plan_files()}
    assert data_files and all(p.startswith(f"s3://{moto_s3.name}/") for p in data_files)
    assert {p.removeprefix(f"s3://{moto_s3.name}/") for p in data_files} <= keys
    assert table.metadata_location.removeprefix(f"s3://{moto_s3.name}/") in keys
    assert any(k.endswith(".avro") for k in keys)  # manifests and the manifest list are objects too

    snapshots = len(table.snapshots())
    again = _compact_once(metadata_url, bucket_url, db_url)
    assert again["table_records"] == 0
    table = _load_s3(db_url, bucket_url, topic)
    assert len(table.snapshots()) == snapshots
    assert _table_rows(table.scan().to_arrow()) == want
