"""Object-store usage reports and lag samples

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28

`object_store_usage`: request counts and bytes per role and minute, as reported by agents,
compactors and readers (metadata.usage). `lag_samples`: each group's total lag over time,
sampled by the metadata service for the console's charts.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "object_store_usage",
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("minute_ms", sa.BigInteger(), nullable=False),
        *(
            sa.Column(name, sa.BigInteger(), nullable=False)
            for name in ("puts", "gets", "heads", "lists", "deletes", "errors", "bytes_in", "bytes_out")
        ),
        sa.PrimaryKeyConstraint("role", "minute_ms", name=op.f("pk_object_store_usage")),
    )
    op.create_index(op.f("ix_object_store_usage_minute_ms"), "object_store_usage", ["minute_ms"])
    op.create_table(
        "lag_samples",
        sa.Column("group_id", sa.String(length=1024), nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("lag", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "at_ms", name=op.f("pk_lag_samples")),
    )
    op.create_index(op.f("ix_lag_samples_at_ms"), "lag_samples", ["at_ms"])


def downgrade() -> None:
    op.drop_index(op.f("ix_lag_samples_at_ms"), table_name="lag_samples")
    op.drop_table("lag_samples")
    op.drop_index(op.f("ix_object_store_usage_minute_ms"), table_name="object_store_usage")
    op.drop_table("object_store_usage")
