"""retention, garbage collection and offset expiry

Revision ID: 0004
Revises: 0001
Create Date: 2026-11-30

The garbage collector's claim columns on files, the group activity rows that offset
expiry reads, and the maintenance runs behind the last-successful-cleanup metric.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("files") as batch:
        batch.add_column(sa.Column("gc_claim_token", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("gc_claimed_until_ms", sa.BigInteger(), nullable=True))
    op.create_table(
        "group_activity",
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("last_active_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", name=op.f("pk_group_activity")),
    )
    op.create_table(
        "maintenance_runs",
        sa.Column("task", sa.String(length=64), nullable=False),
        sa.Column("last_success_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("task", name=op.f("pk_maintenance_runs")),
    )


def downgrade() -> None:
    op.drop_table("maintenance_runs")
    op.drop_table("group_activity")
    with op.batch_alter_table("files") as batch:
        batch.drop_column("gc_claimed_until_ms")
        batch.drop_column("gc_claim_token")
