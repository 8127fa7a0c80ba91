"""`skiff compact` on transactional data, end to end: `skiff agent` on moto's S3 server,
the metadata HTTP service on SQLite in this process, confluent-kafka's transactional
producer, the compactor as a subprocess.

One compacted partition receives, in order: a committed transaction (keys k0..k9), an
aborted one (k0..k4: newer than the committed values, so a cleaner that kept its records
in the key map would delete the committed ones), a committed one (k5..k7), a plain
record (k8), then an open transaction (k0, k1) and a plain record (k2) above it.

- The first `skiff compact --once` stops at the last stable offset: below it one record
  per key survives at its original offset (the latest committed or plain one), no
  aborted record is left; at and above it nothing changed. read_committed consumers read
  exactly the survivors up to the LSO, read_uncommitted ones those plus everything above.
- Once the open transaction commits, cleans (each after a plain write, so there is dirty
  data) leave one record per key for both isolation levels after every clean, while the
  ABORT marker is kept (the first clean met its data), rewritten with a delete horizon
  (`delete.retention.ms` 0) by the next, and removed by the one after, whose swap
  deletes the aborted transaction's `txn_aborted` row; `--json` counts both.

Consumers read until end-of-partition (a deadline only bounds a failing test).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from skiff.metadata.schema import txn_aborted
from skiff.metadata.service import MetadataService
from sqlalchemy import select

from tests.e2e.test_compaction_cli import ShiftedClock, _env, metadata_server  # noqa: F401 (fixture)
from tests.support.agents import SkiffProcess, agent_args, skiff_command
from tests.support.s3servers import S3Bucket
from tests.support.txn_clients import read_to_end

pytestmark = [pytest.mark.s3]

TOPIC = "txn-table"
DEADLINE_S = 60.0
Rec = tuple[int, bytes, bytes]  # offset, key, value


def _compact(bucket: S3Bucket, metadata_url: str) -> dict[str, object]:
    done = subprocess.run(
        [
            *skiff_command(),
            "compact",
            "--bucket",
            bucket.url("data"),
            "--metadata",
            metadata_url,
            "--once",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(bucket),
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _read(bootstrap: str, isolation: str) -> tuple[list[Rec], int]:
    """Every record of partition 0 from offset 0 to its end (the LSO for read_committed),
    and the offset where the consumer reached the end."""
    messages, ends = read_to_end(bootstrap, TOPIC, isolation, 1, DEADLINE_S)
    return [(m.offset(), m.key(), m.value()) for m in messages], ends[0]


def _aborted_rows(svc: MetadataService) -> list[tuple[int, int, int]]:
    with svc.engine.connect() as conn:
        rows = conn.execute(
            select(txn_aborted.c.producer_id, txn_aborted.c.first_offset, txn_aborted.c.last_offset)
        )
        return sorted((int(a), int(b), int(c)) for a, b, c in rows)


def _latest(records: list[Rec]) -> list[Rec]:
    last: dict[bytes, Rec] = {}
    for r in records:
        last[r[1]] = r
    return sorted(last.values())


def test_compaction_of_transactions_end_to_end(
    metadata_server: tuple[str, MetadataService, ShiftedClock],  # noqa: F811 (first: torn down after the agent)
    spawn_skiff: Callable[..., SkiffProcess],
    moto_s3: S3Bucket,
) -> None:
    metadata_url, svc, _clock = metadata_server
    agent = spawn_skiff(
        *agent_args(moto_s3.url("data"), metadata_url),
        env={**moto_s3.env, "SKIFF_FLUSH_INTERVAL_MS": "20", "SKIFF_CHUNK_CACHE_TTL_MS": "1"},
    )
    bootstrap = agent.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0"}
    admin.create_topics([NewTopic(TOPIC, 1, 1, config=config)])[TOPIC].result(timeout=30)

    delivered: dict[tuple[bytes, bytes], int] = {}

    def on_delivery(err: object, msg: object) -> None:
        assert err is None, err
        delivered[(msg.key(), msg.value())] = msg.offset()  # type: ignore[attr-defined]

    def send(p: Producer, pairs: list[tuple[str, str]]) -> list[Rec]:
        for k, v in pairs:
            p.produce(TOPIC, v.encode(), key=k.encode(), partition=0, on_delivery=on_delivery)
        assert p.flush(30) == 0
        return [(delivered[(k.encode(), v.encode())], k.encode(), v.encode()) for k, v in pairs]

    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4()}", "linger.ms": 5})
    tx.init_transactions(30)
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})

    tx.begin_transaction()
    a = send(tx, [(f"k{i}", f"a{i}") for i in range(10)])
    tx.commit_transaction(30)
    tx.begin_transaction()
    b = send(tx, [(f"k{i}", f"b{i}") for i in range(5)])
    tx.abort_transaction(30)
    tx.begin_transaction()
    c = send(tx, [(f"k{i}", f"c{i}") for i in range(5, 8)])
    tx.commit_transaction(30)
    n8 = send(plain, [("k8", "n8")])
    opener = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4()}", "linger.ms": 5}
    )
    opener.init_transactions(30)
    opener.begin_transaction()
    d = send(opener, [("k0", "d0"), ("k1", "d1")])
    n2 = send(plain, [("k2", "n2")])
    lso = d[0][0]
    assert max(r[0] for r in a + b + c + n8) < lso < n2[0][0]
    before, _ = _read(bootstrap, "read_uncommitted")
    assert [r for r in before if r[0] >= lso] == d + n2
    assert len(_aborted_rows(svc)) == 1

    summary = _compact(moto_s3, metadata_url)
    assert summary["jobs"] == 1
    assert summary["aborted_batches_dropped"] >= 1 and summary["markers_dropped"] == 0
    survivors = _latest(a + c + n8)  # k0..k4 from a (b aborted), k5..k7 from c, k8 n8, k9 a9
    got_committed, end = _read(bootstrap, "read_committed")
    assert (got_committed, end) == (survivors, lso)
    got_all, _ = _read(bootstrap, "read_uncommitted")
    assert got_all == survivors + d + n2  # nothing at or above the LSO changed
    assert not set(got_all) & set(b)

    # The open transaction commits; cleans (after a plain write each, so there is dirty
    # data) leave one record per key, and the ABORT marker goes in the end.
    opener.commit_transaction(30)
    written = a + c + n8 + d + n2
    markers_dropped = 0
    for i in range(4):
        written += send(plain, [("k9", f"n9-{i}")])
        markers_dropped += int(str(_compact(moto_s3, metadata_url)["markers_dropped"]))
        # every clean reaches the high watermark: one record per key, whatever state the
        # ABORT marker is in (kept, rewritten with a delete horizon, removed)
        for isolation in ("read_committed", "read_uncommitted"):
            assert _read(bootstrap, isolation)[0] == _latest(written)
        if not _aborted_rows(svc):
            break
    assert _aborted_rows(svc) == []
    # the first clean kept the ABORT marker (it met its data), the next gave it a delete
    # horizon (now + 0), the one after removed it
    assert (markers_dropped, i) == (1, 1)
