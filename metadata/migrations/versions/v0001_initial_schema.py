"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("agent_id", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("zone", sa.String(length=255), nullable=True),
        sa.Column("last_heartbeat_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("agent_id", name=op.f("pk_agents")),
    )
    op.create_table(
        "files",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("object_key", sa.String(length=1024), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("writer", sa.String(length=255), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("committed_ms", sa.BigInteger(), nullable=False),
        sa.Column("deleting_since_ms", sa.BigInteger(), nullable=True),
        sa.CheckConstraint("state IN ('live', 'deleting')", name=op.f("ck_files_state")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_files")),
        sa.UniqueConstraint("object_key", name=op.f("uq_files_object_key")),
    )
    op.create_index(op.f("ix_files_state_deleting_since_ms"), "files", ["state", "deleting_since_ms"])
    op.create_table(
        "group_offsets",
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("topic", sa.String(length=255), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("committed_offset", sa.BigInteger(), nullable=False),
        sa.Column("metadata", sa.Text(), nullable=True),
        sa.Column("leader_epoch", sa.Integer(), nullable=False),
        sa.Column("commit_time_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "topic", "partition", name=op.f("pk_group_offsets")),
    )
    op.create_table(
        "producer_state",
        sa.Column("topic_id", sa.Uuid(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("producer_id", sa.BigInteger(), nullable=False),
        sa.Column("producer_epoch", sa.Integer(), nullable=False),
        sa.Column("batches", sa.JSON(), nullable=False),
        sa.Column("last_update_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("topic_id", "partition", "producer_id", name=op.f("pk_producer_state")),
    )
    sequences = op.create_table(
        "sequences",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("next_value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_sequences")),
    )
    op.bulk_insert(sequences, [{"name": "producer_id", "next_value": 0}])
    op.create_table(
        "topics",
        sa.Column("topic_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("partition_count", sa.Integer(), nullable=False),
        sa.Column("configs", sa.JSON(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("topic_id", name=op.f("pk_topics")),
        sa.UniqueConstraint("name", name=op.f("uq_topics_name")),
    )
    op.create_table(
        "chunks",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("file_id", BigId, nullable=False),
        sa.Column("topic_id", sa.Uuid(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("byte_position", sa.BigInteger(), nullable=False),
        sa.Column("byte_length", sa.BigInteger(), nullable=False),
        sa.Column("base_offset", sa.BigInteger(), nullable=False),
        sa.Column("last_offset", sa.BigInteger(), nullable=False),
        sa.Column("record_count", sa.BigInteger(), nullable=False),
        sa.Column("batch_count", sa.Integer(), nullable=False),
        sa.Column("max_timestamp", sa.BigInteger(), nullable=False),
        sa.Column("offsets_absolute", sa.Boolean(), nullable=False),
        sa.Column("present_offsets", sa.LargeBinary(), nullable=True),
        sa.CheckConstraint("last_offset >= base_offset", name=op.f("ck_chunks_offsets")),
        sa.ForeignKeyConstraint(["file_id"], ["files.id"], name=op.f("fk_chunks_file_id_files")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_chunks")),
    )
    op.create_index(op.f("ix_chunks_file_id"), "chunks", ["file_id"])
    op.create_index(
        op.f("ix_chunks_topic_id_partition_last_offset"),
        "chunks",
        ["topic_id", "partition", "last_offset"],
        unique=True,
    )
    op.create_table(
        "partitions",
        sa.Column("topic_id", sa.Uuid(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("log_start_offset", sa.BigInteger(), nullable=False),
        sa.Column("high_watermark", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["topic_id"], ["topics.topic_id"], name=op.f("fk_partitions_topic_id_topics")
        ),
        sa.PrimaryKeyConstraint("topic_id", "partition", name=op.f("pk_partitions")),
    )


def downgrade() -> None:
    op.drop_table("partitions")
    op.drop_index(op.f("ix_chunks_topic_id_partition_last_offset"), table_name="chunks")
    op.drop_index(op.f("ix_chunks_file_id"), table_name="chunks")
    op.drop_table("chunks")
    op.drop_table("topics")
    op.drop_table("sequences")
    op.drop_table("producer_state")
    op.drop_table("group_offsets")
    op.drop_index(op.f("ix_files_state_deleting_since_ms"), table_name="files")
    op.drop_table("files")
    op.drop_table("agents")
