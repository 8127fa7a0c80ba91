"""Alembic environment for the metadata schema.

Normally run through `metadata.db.upgrade_to_head(engine)`, which passes an open
connection (already inside a transaction holding the migration lock) in
`config.attributes["connection"]`. From the `alembic` command line, pass the database
with `-x url=...`.
"""

from __future__ import annotations

from alembic import context
from skiff.metadata.schema import metadata_obj
from sqlalchemy import Connection


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata_obj,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from skiff.metadata.db import create_engine_for  # the command line: -x url=...

    url = context.get_x_argument(as_dictionary=True).get("url") or context.config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise SystemExit("pass the database URL with -x url=...")
    engine = create_engine_for(url)
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported")
run_migrations_online()
