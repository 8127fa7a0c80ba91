"""committed offsets have a place in __consumer_offsets

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28

Each committed offset gets the partition of its group in `__consumer_offsets` (Kafka's rule:
the group id's Java hash code modulo 50) and an offset there, from one counter row per
partition in `sequences` (metadata.groups.offsets_log). Offsets already stored are placed in
commit-time order.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None

PARTITIONS = 50


def _java_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units, 32-bit wrap-around); frozen here as
    metadata.groups.offsets_log.java_hash was when this migration was written."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _partition(group_id: str) -> int:
    h = _java_hash(group_id)
    return (0 if h == -(2**31) else abs(h)) % PARTITIONS


def upgrade() -> None:
    with op.batch_alter_table("group_offsets") as batch:
        batch.add_column(sa.Column("log_partition", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("log_offset", sa.BigInteger(), nullable=True))
    op.create_index(
        op.f("ix_group_offsets_log_partition_log_offset"), "group_offsets", ["log_partition", "log_offset"]
    )
    conn = op.get_bind()
    g = sa.table(
        "group_offsets",
        sa.column("group_id"),
        sa.column("topic"),
        sa.column("partition"),
        sa.column("commit_time_ms"),
        sa.column("log_partition"),
        sa.column("log_offset"),
    )
    rows = conn.execute(
        sa.select(g.c.group_id, g.c.topic, g.c.partition).order_by(g.c.commit_time_ms, g.c.group_id)
    ).all()
    next_offset = [0] * PARTITIONS
    for r in rows:
        p = _partition(r.group_id)
        conn.execute(
            g.update()
            .where(g.c.group_id == r.group_id, g.c.topic == r.topic, g.c.partition == r.partition)
            .values(log_partition=p, log_offset=next_offset[p])
        )
        next_offset[p] += 1
    seq = sa.table("sequences", sa.column("name"), sa.column("next_value"))
    op.bulk_insert(
        seq, [{"name": f"consumer_offsets-{p}", "next_value": n} for p, n in enumerate(next_offset)]
    )


def downgrade() -> None:
    op.execute("DELETE FROM sequences WHERE name LIKE 'consumer_offsets-%'")
    op.drop_index(op.f("ix_group_offsets_log_partition_log_offset"), "group_offsets")
    with op.batch_alter_table("group_offsets") as batch:
        batch.drop_column("log_offset")
        batch.drop_column("log_partition")
