"""`txn_aborted` rows go with the log they describe (metadata.transactions.cleanup): DeleteRecords
and retention delete the aborted transactions whose ABORT marker falls below the new log
start, in the transaction that moves it; those at or above it stay. The real metadata
service on SQLite and PostgreSQL, an injected clock; files are committed as agents
commit them (the commit path writes `txn_open` / `txn_aborted`)."""

from __future__ import annotations

import uuid

from skiff.metadata.schema import txn_aborted
from skiff.metadata.service import MetadataService
from skiff.metadata.types import BatchSpec, ChunkSpec, DeleteRecordsQuery, FileSpec
from sqlalchemy import select

from tests.support import compaction_model
from tests.support.compaction_model import Clock

service = compaction_model.service  # the fixture: SQLite and PostgreSQL, an injected clock
TXN_ID = f"tc-{uuid.uuid4().hex[:8]}"  # a new transactional id per run (the database may be shared)


def _commit_aborted_txn(svc: MetadataService, topic_id: uuid.UUID, pid: int, seq: int, ts: int) -> None:
    """One file: a transactional batch of 2 records of `TXN_ID` (whose transaction holds
    the partition), its ABORT marker, a plain record."""
    batches = (
        BatchSpec(0, 100, 2, 2, ts, pid, 0, seq, 0, True, -1, TXN_ID),
        BatchSpec(100, 80, 1, 1, ts, pid, 0, -1, 0, True, 0),
        BatchSpec(180, 70, 1, 1, ts, -1),
    )
    (res,) = svc.commit_file(
        FileSpec(f"agents/a/{uuid.uuid4().hex}", 250, 0, "a"), [ChunkSpec(topic_id, 0, batches)]
    )
    assert res.error_code == 0 and all(b.error_code == 0 for b in res.batches), res


def _rows(svc: MetadataService, topic_id: uuid.UUID) -> list[tuple[int, int, int]]:
    a = txn_aborted.c
    with svc.engine.connect() as conn:
        rows = conn.execute(
            select(a.producer_id, a.first_offset, a.last_offset).where(a.topic_id == topic_id)
        )
        return sorted((int(p), int(f), int(la)) for p, f, la in rows)


def test_delete_records_and_retention_forget_aborted_transactions_below_the_log_start(
    service: tuple[MetadataService, Clock],
) -> None:
    svc, clock = service
    name = f"tc-{uuid.uuid4().hex[:8]}"
    t = svc.create_topic(name, 1, {"retention.ms": "10000"})
    # The markers below are written straight into the files (no EndTxn): the transaction
    # stays ongoing, so each file's transactional batch is accepted.
    pid = svc.transactions.init_producer_id(TXN_ID, 60_000).producer_id
    svc.transactions.add_partitions(TXN_ID, pid, 0, [(str(t.topic_id), 0)])
    _commit_aborted_txn(svc, t.topic_id, pid, 0, clock.now - 60_000)  # offsets 0-1, marker 2, plain 3
    _commit_aborted_txn(svc, t.topic_id, pid, 2, clock.now)  # offsets 4-5, marker 6, plain 7
    _commit_aborted_txn(svc, t.topic_id, pid, 4, clock.now)  # offsets 8-9, marker 10, plain 11
    assert _rows(svc, t.topic_id) == [(pid, 0, 2), (pid, 4, 6), (pid, 8, 10)]

    # retention.ms drops the first (old) chunk: the log starts at 4
    (r,) = svc.enforce_retention(name)
    assert r.log_start_offset == 4
    assert _rows(svc, t.topic_id) == [(pid, 4, 6), (pid, 8, 10)]

    # DeleteRecords to 7: the marker at 6 is below it, the one at 10 is not
    (answer,) = svc.delete_records([DeleteRecordsQuery(name, 0, 7)])
    assert (answer.error_code, answer.low_watermark) == (0, 7)
    assert _rows(svc, t.topic_id) == [(pid, 8, 10)]
