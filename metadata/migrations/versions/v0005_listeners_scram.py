"""agent listeners and SCRAM credentials

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24

Each agent row lists every advertised listener (JSON; NULL in rows written before, which
keep their host/port as the one address), and SCRAM credentials are stored salted per user
and mechanism.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("listeners", sa.Text(), nullable=True))
    op.create_table(
        "scram_credentials",
        sa.Column("user_name", sa.String(length=255), nullable=False),
        sa.Column("mechanism", sa.String(length=32), nullable=False),
        sa.Column("salt", sa.LargeBinary(), nullable=False),
        sa.Column("iterations", sa.Integer(), nullable=False),
        sa.Column("stored_key", sa.LargeBinary(), nullable=False),
        sa.Column("server_key", sa.LargeBinary(), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("user_name", "mechanism", name=op.f("pk_scram_credentials")),
    )


def downgrade() -> None:
    op.drop_table("scram_credentials")
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("listeners")
