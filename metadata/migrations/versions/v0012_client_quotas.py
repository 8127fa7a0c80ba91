"""Kafka client quotas

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29

The `client_quotas` table (one row per quota entity and key: metadata.security.quotas) and
the `client_quota_version` counter row that every quota change increments.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "client_quotas",
        sa.Column("entity_user", sa.String(length=1025), nullable=False),
        sa.Column("entity_client_id", sa.String(length=1025), nullable=False),
        sa.Column("quota_key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "entity_user", "entity_client_id", "quota_key", name=op.f("pk_client_quotas")
        ),
    )
    sequences = sa.table("sequences", sa.column("name", sa.String), sa.column("next_value", sa.BigInteger))
    op.bulk_insert(sequences, [{"name": "client_quota_version", "next_value": 0}])


def downgrade() -> None:
    op.execute("DELETE FROM sequences WHERE name = 'client_quota_version'")
    op.drop_table("client_quotas")
