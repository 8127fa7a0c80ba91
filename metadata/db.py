"""Engines for SQLite and PostgreSQL, transactions, and running the migrations.

- SQLite (the embedded default): a file, WAL journal, `synchronous=FULL` (an acked commit
  survives power loss), `busy_timeout`, foreign keys on. The sqlite3 driver's own
  transaction handling is switched off and we emit BEGIN ourselves: write transactions
  start with `BEGIN IMMEDIATE`, which takes the database's single write lock up front, so
  writers (threads or processes) queue on the busy timeout instead of deadlocking on lock
  upgrades; readers use a deferred BEGIN and run concurrently (WAL snapshot).
- PostgreSQL (`postgresql://`, `postgres://` or `postgresql+psycopg://`): psycopg 3, a
  bounded pool, READ COMMITTED; the service takes row locks in a fixed order.

Timing: `observe_transactions(engine, observer)` has every `write_tx` / `read_tx` of that
engine report `observer("write" | "read", seconds)` when it ends, committed, rolled back or
failed: from asking for the connection (and, on SQLite, the process's write lock) to the
end of the transaction (the metadata service's transaction histogram,
metadata.server.metrics). Engines without an observer pay one dictionary lookup.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

SQLITE_BUSY_TIMEOUT_MS = 30_000
_WRITE_OPTION = "skiff_write_tx"
# pg_advisory_xact_lock key serializing concurrent migrators (e.g. several replicas starting).
_MIGRATION_LOCK_KEY = zlib.crc32(b"skiff-metadata-migrations")


def normalize_db_url(db_url: str) -> str:
    """Accept the usual spellings: `postgres://` and `postgresql://` get the psycopg driver."""
    for prefix in ("postgresql://", "postgres://", "postgresql+psycopg2://"):
        if db_url.startswith(prefix):
            return "postgresql+psycopg://" + db_url[len(prefix) :]
    return db_url


def create_engine_for(
    db_url: str,
    *,
    pool_size: int = 8,
    max_overflow: int = 8,
    sqlite_synchronous: str = "FULL",
    echo: bool = False,
) -> Engine:
    url = make_url(normalize_db_url(db_url))
    backend = url.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(str(url), sqlite_synchronous, echo)
    if backend == "postgresql":
        return create_engine(
            url,
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_pre_ping=True,
            pool_recycle=1800,
            pool_timeout=30,
            echo=echo,
            connect_args={"connect_timeout": 10, "options": "-c statement_timeout=120000"},
        )
    raise ValueError(f"unsupported database URL {db_url!r}: use sqlite:///path or postgresql://...")


def _sqlite_engine(url: str, synchronous: str, echo: bool) -> Engine:
    parsed = make_url(url)
    memory = parsed.database in (None, "", ":memory:")
    kwargs: dict[str, Any] = {
        "connect_args": {"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        "echo": echo,
    }
    if memory:
        kwargs["poolclass"] = StaticPool  # one shared connection, or every checkout sees an empty db
    elif parsed.database:
        d = os.path.dirname(os.path.abspath(parsed.database))
        os.makedirs(d, exist_ok=True)
    engine = create_engine(url, **kwargs)
    if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise ValueError(f"bad sqlite synchronous mode {synchronous!r}")

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (see the "begin" hook)
        cur = dbapi_conn.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            if not memory:
                cur.execute("PRAGMA journal_mode = WAL")
            cur.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            cur.execute("PRAGMA foreign_keys = ON")
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(_WRITE_OPTION):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")

    return engine


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def is_postgresql(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"


_SQLITE_WRITE_LOCKS: weakref.WeakKeyDictionary[Engine, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def _sqlite_write_lock(engine: Engine) -> threading.RLock:
    # Re-entrant: a transaction opened inside another on the same thread then fails in the
    # database (an error) rather than waiting on this lock for ever (a hang).
    with _LOCKS_GUARD:
        lock = _SQLITE_WRITE_LOCKS.get(engine)
        if lock is None:
            lock = _SQLITE_WRITE_LOCKS[engine] = threading.RLock()
        return lock


def _is_sqlite_memory(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite" and engine.url.database in (None, "", ":memory:")


TxObserver = Callable[[str, float], None]
_TX_OBSERVERS: weakref.WeakKeyDictionary[Engine, TxObserver] = weakref.WeakKeyDictionary()


def observe_transactions(engine: Engine, observer: TxObserver | None) -> None:
    """Report each transaction of `engine` to `observer(kind, seconds)` (None: stop)."""
    with _LOCKS_GUARD:
        if observer is None:
            _TX_OBSERVERS.pop(engine, None)
        else:
            _TX_OBSERVERS[engine] = observer


@contextmanager
def _timed(engine: Engine, kind: str) -> Iterator[None]:
    observer = _TX_OBSERVERS.get(engine)
    if observer is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:  # a failed transaction took its time too
        observer(kind, time.perf_counter() - started)


@contextmanager
def write_tx(engine: Engine) -> Iterator[Connection]:
    """A read-write transaction: commits on normal exit, rolls back on an exception.

    On SQLite it starts with BEGIN IMMEDIATE (the write lock is taken at once), and the
    threads of this process queue on a lock before that: SQLite's busy handler makes
    waiting writers sleep and poll (up to 100 ms at a time), which would put a long
    tail on commit latency when several threads commit at once. Other processes still
    wait on the busy timeout."""
    with _timed(engine, "write"):
        if engine.dialect.name == "sqlite":
            with _sqlite_write_lock(engine), engine.connect() as conn:
                conn.execution_options(**{_WRITE_OPTION: True})
                with conn.begin():
                    yield conn
            return
        with engine.connect() as conn:
            conn.execution_options(**{_WRITE_OPTION: True})
            with conn.begin():
                yield conn


@contextmanager
def read_tx(engine: Engine) -> Iterator[Connection]:
    """A read-only transaction whose statements all see one snapshot of the database.

    Reads that combine several statements rely on it: a partition's high watermark and its
    open transactions (the last stable offset), then its chunks and aborted transactions
    (find_chunks); the ACL version and the bindings; a group's offsets and its lease. Under
    READ COMMITTED each statement would take its own snapshot, and a commit landing between
    two of them would pair, say, a last stable offset with a watermark it never had.

    - PostgreSQL: REPEATABLE READ READ ONLY, set on this connection only. SQLAlchemy's
      `isolation_level` / `postgresql_readonly` execution options become psycopg's
      connection attributes, so psycopg starts the transaction with `BEGIN ISOLATION LEVEL
      REPEATABLE READ READ ONLY` (no extra round trip), and the pool restores the engine's
      defaults (READ COMMITTED, read-write) when the connection is checked in: write
      transactions on the same pooled connection later are unaffected. The snapshot is taken
      at the first statement. Serialization failures (40001) cannot happen here: at
      REPEATABLE READ PostgreSQL raises them only when a transaction updates, deletes or
      locks (FOR UPDATE/SHARE) a row that a concurrent transaction changed after the
      snapshot, and a READ ONLY transaction can do none of these (they fail at once
      instead, as a programming error). Row writers never wait on these readers (MVCC).
    - SQLite: a deferred BEGIN. In WAL mode a read transaction keeps the snapshot its first
      statement saw (its WAL read mark) until it ends, whatever writers commit meanwhile:
      already one snapshot, nothing to set. (An in-memory database is not in WAL mode; it
      has a single connection, shared by every transaction, so its reads take the write
      lock too; it serves tests and the playground's throwaway runs.)
    """
    if _is_sqlite_memory(engine):
        # One connection shared by every thread: a read beginning while another thread's
        # transaction is open on it would fail ("cannot start a transaction within a
        # transaction"), so reads queue with the writers.
        with _sqlite_write_lock(engine), _timed(engine, "read"), engine.connect() as conn, conn.begin() as tx:
            yield conn
            tx.rollback()
        return
    with _timed(engine, "read"), engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
        with conn.begin() as tx:
            yield conn
            tx.rollback()


def _alembic_config(connection: Connection | None = None) -> Any:
    from alembic.config import Config

    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")
    cfg = Config(os.path.join(here, "alembic.ini"))
    cfg.set_main_option("script_location", here)
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade_to_head(engine: Engine) -> None:
    """Bring the schema to the newest migration. Safe to call from several processes at
    once: migrators serialize on a lock (PostgreSQL advisory lock; SQLite write lock) and
    re-check the version under it."""
    from alembic import command

    head = head_revision()
    if current_revision(engine) == head:
        return
    with write_tx(engine) as conn:
        if is_postgresql(engine):
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK_KEY})
        command.upgrade(_alembic_config(conn), "head")


def is_db_unavailable(e: BaseException) -> bool:
    """Whether a database error means "unreachable / busy / timed out" (retriable) rather
    than "this request is wrong": connection failures, pool timeouts, SQLite's
    'database is locked', PostgreSQL's statement timeouts and deadlock aborts."""
    from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    if isinstance(e, (PoolTimeout, DisconnectionError, OperationalError, InterfaceError)):
        return True
    return isinstance(e, DBAPIError) and bool(e.connection_invalidated)
