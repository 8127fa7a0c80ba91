"""PostgreSQL for tests (a pytest plugin, registered in tests/conftest.py).

The server is the one on 127.0.0.1:5432 (trust auth, user `postgres`), or whatever
`SKIFF_TEST_PG_ADMIN_URL` points at (a URL of a database the tests may connect to with
the right to CREATE DATABASE). Each test that asks for `pg_url` gets a fresh, uniquely
named, empty database that is dropped afterwards; `pg_module_url` shares one per module.
If the server cannot be reached the test FAILS (pytest.fail), it never skips.

`db_url` is parametrized over both backends: `sqlite` (a file under tmp_path) and
`postgresql` (a fresh database, marked `postgres`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
_FALLBACK_ADMIN_URLS = (
    "postgresql://postgres@127.0.0.1:5432/postgres",
    "postgresql://postgres@127.0.0.1:5432/test",
    "postgresql://root@127.0.0.1:5432/test",
)


def _admin_url() -> str:
    explicit = os.environ.get("SKIFF_TEST_PG_ADMIN_URL")
    candidates = (explicit,) if explicit else _FALLBACK_ADMIN_URLS
    errors = []
    for url in candidates:
        try:
            with psycopg.connect(url, connect_timeout=5, autocommit=True) as conn:
                conn.execute("SELECT 1")
            return url
        except psycopg.Error as e:
            errors.append(f"{url}: {e}")
    pytest.fail(
        "PostgreSQL is required by this test and is not reachable (start it with "
        "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`, or set "
        "SKIFF_TEST_PG_ADMIN_URL):\n  " + "\n  ".join(errors),
        pytrace=False,
    )


def _with_database(admin_url: str, dbname: str) -> str:
    base, _, _ = admin_url.rpartition("/")
    return f"{base}/{dbname}".replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    """A URL of the PostgreSQL server's maintenance database (fails the test if down)."""
    return _admin_url()


def _create_database(admin_url: str) -> str:
    name = f"skiff_test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def _drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_admin_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test (postgresql+psycopg:// URL)."""
    name = _create_database(pg_admin_url)
    try:
        yield _with_database(pg_admin_url, name)
    finally:
        _drop_database(pg_admin_url, name)


@pytest.fixture(scope="module")
def pg_module_url(pg_admin_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database shared by the tests of one module."""
    name = _create_database(pg_admin_url)
    try:
        yield _with_database(pg_admin_url, name)
    finally:
        _drop_database(pg_admin_url, name)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    """An empty database URL, once per backend: a SQLite file, then a fresh PostgreSQL db."""
    if request.param == "sqlite":
        return f"sqlite:///{os.path.join(os.fspath(tmp_path), 'metadata.db')}"
    return str(request.getfixturevalue("pg_url"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that use the PostgreSQL fixtures directly carry the `postgres` marker too."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if any(n in names for n in ("pg_url", "pg_module_url", "pg_admin_url")):
            item.add_marker(pytest.mark.postgres)
