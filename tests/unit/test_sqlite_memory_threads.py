"""An in-memory SQLite database has one connection shared by every thread (StaticPool): its
transactions must queue, or a read beginning while another thread's write is open fails
with "cannot start a transaction within a transaction" (seen in CI: the metadata app's lag
sampler read while a request wrote, and the request answered 503)."""

from __future__ import annotations

import threading

import pytest
from skiff.metadata.db import create_engine_for, read_tx, write_tx
from sqlalchemy import text
from sqlalchemy.exc import OperationalError


def test_reads_and_writes_from_many_threads_queue_on_one_memory_connection() -> None:
    engine = create_engine_for("sqlite://")
    with write_tx(engine) as conn:
        conn.execute(text("CREATE TABLE n (v INTEGER)"))
    rounds, threads = 150, 4
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        start.wait()
        try:
            for r in range(rounds):
                if (i + r) % 2:
                    with write_tx(engine) as conn:
                        conn.execute(text("INSERT INTO n VALUES (:v)"), {"v": r})
                else:
                    with read_tx(engine) as conn:
                        conn.execute(text("SELECT count(*) FROM n")).scalar_one()
        except BaseException as e:  # collected: the assertion below names it
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    with read_tx(engine) as conn:
        assert conn.execute(text("SELECT count(*) FROM n")).scalar_one() == rounds * threads // 2


def test_a_transaction_inside_another_on_one_thread_fails_instead_of_hanging() -> None:
    engine = create_engine_for("sqlite://")
    with write_tx(engine), pytest.raises(OperationalError, match="transaction"), read_tx(engine):
        pass
