"""The table materializer across SIGKILLs, side by side, and on the playground's timer.

Real parts: `skiff agent` on a file:// bucket, the metadata HTTP service on SQLite in this
process (its clock shifted by the test to expire a dead run's lease), confluent-kafka
producers (plain records, a committed and an aborted transaction), `skiff compact --once`
subprocesses stopped by the test hook `SKIFF_TABLES_PAUSE_AT` (compactor.tables_pause).

- A `skiff compact` SIGKILLed at its second commit, at each stage (after the Parquet files
  are written, after the metadata JSON is written and before the catalog's swap, after the
  snapshot commit): the table holds a duplicate-free prefix of the records; a rerun once
  the dead run's lease has expired leaves exactly what a read_committed consumer reads (no
  duplicate, no gap).
- The same for a compacted topic's table killed mid-upsert (its second commit, after the
  copy-on-write rewrite and the new rows are written): the rerun leaves the latest value
  per key, each key once.
- While one `skiff compact` holds a topic (paused mid-commit), another one run beside it
  materializes nothing of that topic.
- `skiff playground`'s maintenance timer materializes a table-enabled topic by itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from skiff.compactor.tables_pause import ENV as PAUSE_ENV
from skiff.compactor.tables_pause import MARKER as PAUSE_MARKER
from skiff.metadata.service import MetadataService

from tests.component.test_tables import _consumed, _create, _load, _produce, _start, _table_rows
from tests.e2e.test_compaction_cli import ShiftedClock, metadata_server  # noqa: F401 (fixture)
from tests.support.agents import SkiffProcess, free_port, skiff_command

LEASE_MS = 2000
DEADLINE_S = 60.0


def _compact_argv(metadata_url: str, bucket_url: str, db_url: str, topic: str) -> list[str]:
    return [
        *skiff_command(),
        *("compact", "--bucket", bucket_url, "--metadata", metadata_url, "--table-catalog", db_url),
        *("--once", "--json", "--topic", topic, "--lease-ms", str(LEASE_MS)),
        *("--table-max-commit-bytes", "1"),  # one find_chunks answer per commit: several commits
    ]


def _compact_once(argv: list[str]) -> dict[str, Any]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert not out["tables_failed"], done.stderr
    return out


def _paused(argv: list[str], stage: str) -> subprocess.Popen[str]:
    """`skiff compact` stopped at `stage` of its second commit (the marker read from stderr)."""
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, PAUSE_ENV: f"{stage}:2"},
    )
    assert proc.stderr is not None
    seen: list[str] = []
    for line in proc.stderr:  # the process blocks after printing the marker
        seen.append(line)
        if PAUSE_MARKER in line:
            break
    assert seen and f"{PAUSE_MARKER} at {stage}, commit 2" in seen[-1], "".join(seen)
    return proc


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.stderr is not None
    proc.stderr.close()


def test_sigkill_at_every_stage_then_rerun(
    metadata_server: tuple[str, MetadataService, ShiftedClock],  # noqa: F811 (first: torn down after the agent)
    spawn_skiff: Callable[..., SkiffProcess],
    tmp_path: Path,
) -> None:
    metadata_url, _svc, clock = metadata_server
    db_url = f"sqlite:///{tmp_path / 'm.db'}"
    bucket_url = f"file://{tmp_path / 'bucket'}"
    bootstrap = _start(spawn_skiff, metadata_url, bucket_url)
    partitions = 3
    for stage in ("after_parquet", "before_commit", "after_commit"):
        topic = f"killed-{stage.replace('_', '-')}"
        _create(bootstrap, topic, partitions)
        _produce(bootstrap, topic, partitions)
        want = _consumed(bootstrap, topic, partitions)
        argv = _compact_argv(metadata_url, bucket_url, db_url, topic)

        proc = _paused(argv, stage)
        if stage == "after_parquet":  # the lease keeps a second materializer off the topic
            beside = _compact_once(argv)
            assert beside["table_records"] == 0
        _kill(proc)

        table = _load(db_url, topic)
        rows = _table_rows(table.scan().to_arrow())
        assert len(rows) == len(set(rows)) and set(rows) < set(want)
        # one commit is in the table, or two when killed after the second one's commit
        assert len(table.snapshots()) == (2 if stage == "after_commit" else 1)

        clock.shift_ms += LEASE_MS + 1  # the dead run's lease has expired
        rerun = _compact_once(argv)
        assert rerun["table_records"] == len(want) - len(rows)
        assert _table_rows(_load(db_url, topic).scan().to_arrow()) == want


def test_sigkill_mid_upsert_then_rerun(
    metadata_server: tuple[str, MetadataService, ShiftedClock],  # noqa: F811 (first: torn down after the agent)
    spawn_skiff: Callable[..., SkiffProcess],
    tmp_path: Path,
) -> None:
    from tests.component.test_tables_upkeep import Latest, _produce_versions, _rows_by_key

    metadata_url, _svc, clock = metadata_server
    db_url = f"sqlite:///{tmp_path / 'm.db'}"
    bucket_url = f"file://{tmp_path / 'bucket'}"
    bootstrap = _start(spawn_skiff, metadata_url, bucket_url)
    topic = "killed-upsert"
    config = {"skiff.table.enabled": "true", "cleanup.policy": "compact"}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1, config=config)])[topic].result(timeout=30)
    latest: Latest = {}
    _produce_versions(bootstrap, topic, 0, latest)
    argv = _compact_argv(metadata_url, bucket_url, db_url, topic)
    _compact_once(argv)
    _produce_versions(bootstrap, topic, 1, latest)  # updates and tombstones of rows in the table

    _kill(_paused(argv, "after_parquet"))
    held = _rows_by_key(_load(db_url, topic).scan().to_arrow())  # one key once, whatever state
    assert held != latest
    clock.shift_ms += LEASE_MS + 1
    _compact_once(argv)
    assert _rows_by_key(_load(db_url, topic).scan().to_arrow()) == latest


def test_playground_timer_materializes(spawn_skiff: Callable[..., SkiffProcess], tmp_path: Path) -> None:
    data = tmp_path / "data"
    args = ["playground", "--data-dir", str(data), "--port", "{port}", "--metadata-port", str(free_port())]
    playground = spawn_skiff(*args, "--compaction-interval-ms", "200")
    topic = "timed"
    config = {"skiff.table.enabled": "true", "skiff.table.commit.interval.ms": "100"}
    admin = AdminClient({"bootstrap.servers": playground.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": playground.bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(20):
        producer.produce(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=0)
    assert producer.flush(30) == 0

    db_url = f"sqlite:///{data / 'metadata.db'}"
    deadline = time.monotonic() + DEADLINE_S
    values: list[bytes] = []
    while time.monotonic() < deadline:  # polling with a deadline: the timer's passes
        values = _table_values(db_url, topic)
        if len(values) >= 20:
            break
        time.sleep(0.1)
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(20))


def _table_values(db_url: str, topic: str) -> list[bytes]:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    catalog = SqlCatalog("skiff", uri=db_url)
    try:
        table = catalog.load_table(f"skiff.{topic}")
    except (NoSuchTableError, NoSuchNamespaceError):
        return []
    finally:
        catalog.engine.dispose()
    return [v for v in table.scan().to_arrow().column("value").to_pylist() if v is not None]
