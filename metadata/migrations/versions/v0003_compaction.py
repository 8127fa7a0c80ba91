"""compaction: cleaner checkpoints and job leases per partition

Revision ID: 0003
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "compaction_state",
        sa.Column("topic_id", sa.Uuid(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("first_dirty_offset", sa.BigInteger(), nullable=True),
        sa.Column("lease_token", sa.String(length=64), nullable=True),
        sa.Column("lease_holder", sa.String(length=255), nullable=True),
        sa.Column("lease_expires_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("topic_id", "partition", name=op.f("pk_compaction_state")),
    )
    op.create_index(
        op.f("ix_compaction_state_lease_token"), "compaction_state", ["lease_token"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_compaction_state_lease_token"), table_name="compaction_state")
    op.drop_table("compaction_state")
