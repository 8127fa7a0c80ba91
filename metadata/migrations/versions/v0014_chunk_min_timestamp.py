"""Chunks' min timestamps

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28

`chunks.min_timestamp` (ms, nullable): a lower bound of the record timestamps of a chunk (the
smallest one, as the produce path's log validator finds it), so that a Spark query with an
upper time bound leaves out chunks that start after it (spark/pushdown.py). Rows written
before this revision keep NULL: unknown, never pruned.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("chunks") as batch:
        batch.add_column(sa.Column("min_timestamp", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chunks") as batch:
        batch.drop_column("min_timestamp")
