"""Alembic migrations for the metadata tables; run with `metadata.db.upgrade_to_head`."""
