"""metadata.db.read_tx is one snapshot: a commit landing between two statements of a read
is not seen by the second (PostgreSQL: REPEATABLE READ READ ONLY; SQLite: the WAL snapshot
of a read transaction), and on PostgreSQL that isolation stays with the read: a write
transaction on the same pooled connection afterwards is READ COMMITTED and read-write.
Real databases; the reader and the writer are two threads on two connections, ordered by
events."""

from __future__ import annotations

import threading

import pytest
from skiff.metadata.db import create_engine_for, read_tx, upgrade_to_head, write_tx
from skiff.metadata.schema import partitions
from skiff.metadata.service import MetadataService
from sqlalchemy import Connection, select, text, update
from sqlalchemy.exc import DBAPIError

WAIT_S = 30  # a bound on waiting for the other thread, never reached when all is well


def _hwm(conn: Connection, topic_id: object) -> int:
    p = partitions.c
    return int(
        conn.execute(select(p.high_watermark).where(p.topic_id == topic_id, p.partition == 0)).scalar_one()
    )


def test_a_commit_between_two_statements_of_a_read_is_not_seen(
    metadata_service: MetadataService,
) -> None:
    svc = metadata_service
    topic = svc.create_topic("snap", 1, {})
    first_read, committed = threading.Event(), threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            with read_tx(svc.engine) as conn:
                seen.append(_hwm(conn, topic.topic_id))
                first_read.set()
                assert committed.wait(WAIT_S)
                seen.append(_hwm(conn, topic.topic_id))
        except BaseException as e:  # reported by the test thread
            errors.append(e)
            first_read.set()

    t = threading.Thread(target=reader)
    t.start()
    try:
        assert first_read.wait(WAIT_S)
        with write_tx(svc.engine) as conn:  # another connection: the reader holds its own
            p = partitions.c
            conn.execute(
                update(partitions)
                .where(p.topic_id == topic.topic_id, p.partition == 0)
                .values(high_watermark=42)
            )
    finally:
        committed.set()
        t.join(WAIT_S)
    assert not errors, errors
    assert seen == [0, 0]
    with read_tx(svc.engine) as conn:  # the commit did land: a new read sees it
        assert _hwm(conn, topic.topic_id) == 42


def _isolation(conn: Connection) -> tuple[str, str, int]:
    return (
        conn.execute(text("SHOW transaction_isolation")).scalar_one(),
        conn.execute(text("SHOW transaction_read_only")).scalar_one(),
        conn.execute(text("SELECT pg_backend_pid()")).scalar_one(),
    )


def test_postgresql_reads_are_repeatable_read_read_only_and_writes_stay_read_committed(
    pg_url: str,
) -> None:
    # one pooled connection, so the write transactions below reuse the reads' connection
    engine = create_engine_for(pg_url, pool_size=1, max_overflow=0)
    try:
        upgrade_to_head(engine)
        with write_tx(engine) as conn:
            first = _isolation(conn)
        assert first[:2] == ("read committed", "off")

        with read_tx(engine) as conn:
            assert _isolation(conn) == ("repeatable read", "on", first[2])
        with write_tx(engine) as conn:
            assert _isolation(conn) == ("read committed", "off", first[2])

        # a read that fails (here: it tries to write) gives its connection back reset too
        with pytest.raises(DBAPIError, match="read-only transaction"), read_tx(engine) as conn:
            conn.execute(update(partitions).values(high_watermark=0))
        with write_tx(engine) as conn:
            assert _isolation(conn) == ("read committed", "off", first[2])
    finally:
        engine.dispose()
