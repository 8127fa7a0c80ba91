"""group coordinator leases

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "group_leases",
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("holder", sa.String(length=255), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("expires_ms", sa.BigInteger(), nullable=False),
        sa.Column("group_state", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("group_id", name=op.f("pk_group_leases")),
    )


def downgrade() -> None:
    op.drop_table("group_leases")
