"""offsets staged by TxnOffsetCommit

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24

Offsets committed inside a transaction, moved into group_offsets when it commits and
dropped when it aborts (metadata.transactions.offsets).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "txn_offsets",
        sa.Column("transactional_id", sa.Text(), nullable=False),
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("topic", sa.String(length=255), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("committed_offset", sa.BigInteger(), nullable=False),
        sa.Column("metadata", sa.Text(), nullable=True),
        sa.Column("leader_epoch", sa.Integer(), nullable=False),
        sa.Column("commit_time_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "transactional_id", "group_id", "topic", "partition", name=op.f("pk_txn_offsets")
        ),
    )
    op.create_index(op.f("ix_txn_offsets_group_id"), "txn_offsets", ["group_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_txn_offsets_group_id"), table_name="txn_offsets")
    op.drop_table("txn_offsets")
