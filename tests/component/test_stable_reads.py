"""The last stable offset metadata answers belongs to the high watermark it answers with,
even when a commit of markers lands between the statements that read them: each read is
one snapshot (metadata.db.read_tx), so it answers the moment before that commit, never a
watermark of one moment with the open transactions of another. The real service on SQLite
and PostgreSQL (where READ COMMITTED would give each statement its own snapshot); the
markers' commit is a real `commit_file` on another connection, run right after the read's
first statement (the watermark read)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from skiff.metadata.service import MetadataService
from skiff.metadata.types import BatchSpec, ChunkSpec, FetchQuery, FileSpec, PartitionKey

TXN_ID = f"stable-{uuid.uuid4().hex[:8]}"  # a new transactional id per run (the database may be shared)
TS_MS = 1_700_000_000_000
READ_COMMITTED = 1


def _commit(svc: MetadataService, topic_id: uuid.UUID, *batches: BatchSpec) -> None:
    size = sum(b.byte_length for b in batches)
    (res,) = svc.commit_file(
        FileSpec(f"agents/a/{uuid.uuid4().hex}", size, 0, "a"), [ChunkSpec(topic_id, 0, batches)]
    )
    assert res.error_code == 0 and all(b.error_code == 0 for b in res.batches), res


def _open_transaction(svc: MetadataService) -> tuple[uuid.UUID, int]:
    """A topic whose partition 0 holds 4 plain records (offsets 0-3) and a transaction's
    6 records (4-9), still open: high watermark 10, last stable offset 4. Returns the
    topic and the transaction's producer id (a real transactional id whose transaction
    holds the partition: the file commit checks that)."""
    topic = svc.create_topic(f"stable-{uuid.uuid4().hex[:8]}", 1, {})
    pid = svc.transactions.init_producer_id(TXN_ID, 60_000).producer_id
    svc.transactions.add_partitions(TXN_ID, pid, 0, [(str(topic.topic_id), 0)])
    _commit(
        svc,
        topic.topic_id,
        BatchSpec(0, 100, 4, 4, TS_MS),
        BatchSpec(100, 100, 6, 6, TS_MS, pid, 0, 0, 0, True, -1, TXN_ID),
    )
    return topic.topic_id, pid


def _commit_markers(svc: MetadataService, topic_id: uuid.UUID, pid: int) -> None:
    """The transaction's COMMIT marker (offset 10), written straight into a file (no
    EndTxn): high watermark 11, nothing open."""
    _commit(svc, topic_id, BatchSpec(0, 80, 1, 1, TS_MS, pid, 0, -1, 0, True, 1))


def _markers_after_first_watermark_read(
    svc: MetadataService, topic_id: uuid.UUID, pid: int, monkeypatch: pytest.MonkeyPatch
) -> Callable[[], bool]:
    """Make the next watermark read commit the markers (on another connection: the commit
    path's own write transaction) once it has read; returns whether that happened."""
    dialect = svc.reads._db.dialect
    real = dialect.read_partitions
    done = []

    def read_partitions(conn: Any, keys: Any) -> Any:
        seen = real(conn, keys)
        if not done:
            done.append(True)  # first: the commit below reads partitions through here too
            _commit_markers(svc, topic_id, pid)
        return seen

    monkeypatch.setattr(dialect, "read_partitions", read_partitions)
    return lambda: bool(done)


def test_partition_states_answer_one_moment(
    metadata_service: MetadataService, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = metadata_service
    topic_id, pid = _open_transaction(svc)
    key = PartitionKey(topic_id, 0)
    committed = _markers_after_first_watermark_read(svc, topic_id, pid, monkeypatch)

    (state,) = svc.partition_states([key])
    assert committed()
    # the moment before the markers: open from 4 at watermark 10 (never LSO 10 at 10)
    assert (state.high_watermark, state.last_stable_offset) == (10, 4)
    (state,) = svc.partition_states([key])
    assert (state.high_watermark, state.last_stable_offset) == (11, 11)


def test_read_committed_fetch_answers_one_moment(
    metadata_service: MetadataService, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = metadata_service
    topic_id, pid = _open_transaction(svc)
    committed = _markers_after_first_watermark_read(svc, topic_id, pid, monkeypatch)

    (info,) = svc.find_chunks([FetchQuery(topic_id, 0, 0, 1 << 20, READ_COMMITTED)])
    assert committed()
    assert (info.error_code, info.high_watermark, info.last_stable_offset) == (0, 10, 4)
    # the chunks are those of that moment too: the markers' chunk is not among them
    assert [(c.base_offset, c.last_offset) for c in info.chunks] == [(0, 9)]

    (info,) = svc.find_chunks([FetchQuery(topic_id, 0, 0, 1 << 20, READ_COMMITTED)])
    assert (info.high_watermark, info.last_stable_offset) == (11, 11)
    assert [(c.base_offset, c.last_offset) for c in info.chunks] == [(0, 9), (10, 10)]
