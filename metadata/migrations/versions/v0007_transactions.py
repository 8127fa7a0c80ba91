"""transactional producers' state

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24

One row per transactional id (metadata.transactions.store; rules in metadata.transactions.state); per
partition the open transactions (their first offsets: the last stable offset) and the
aborted ones (what read_committed fetches skip).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "transactions",
        sa.Column("transactional_id", sa.Text(), nullable=False),
        sa.Column("producer_id", sa.BigInteger(), nullable=False),
        sa.Column("producer_epoch", sa.Integer(), nullable=False),
        sa.Column("last_producer_id", sa.BigInteger(), nullable=False),
        sa.Column("last_epoch", sa.Integer(), nullable=False),
        sa.Column("timeout_ms", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("partitions", sa.JSON(), nullable=False),
        sa.Column("groups", sa.JSON(), nullable=False),
        sa.Column("start_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_update_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("transactional_id", name=op.f("pk_transactions")),
    )
    op.create_index(op.f("ix_transactions_producer_id"), "transactions", ["producer_id"], unique=False)
    op.create_table(
        "txn_open",
        sa.Column("topic_id", sa.Uuid(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("producer_id", sa.BigInteger(), nullable=False),
        sa.Column("first_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("topic_id", "partition", "producer_id", name=op.f("pk_txn_open")),
    )
    op.create_table(
        "txn_aborted",
        sa.Column("topic_id", sa.Uuid(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("producer_id", sa.BigInteger(), nullable=False),
        sa.Column("first_offset", sa.BigInteger(), nullable=False),
        sa.Column("last_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "topic_id", "partition", "producer_id", "first_offset", name=op.f("pk_txn_aborted")
        ),
    )
    op.create_index(
        op.f("ix_txn_aborted_topic_id_partition_last_offset"),
        "txn_aborted",
        ["topic_id", "partition", "last_offset"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_txn_aborted_topic_id_partition_last_offset"), table_name="txn_aborted")
    op.drop_table("txn_aborted")
    op.drop_table("txn_open")
    op.drop_index(op.f("ix_transactions_producer_id"), table_name="transactions")
    op.drop_table("transactions")
