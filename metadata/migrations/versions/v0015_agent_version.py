"""agents report their software version

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29

Each agent row carries the Skiff version the agent runs (metadata.build_info), sent with
every heartbeat, so operators see which agents run which version during a rolling upgrade
(`skiff agents list`, the console). NULL: a row written by an agent from before versions.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("version", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("version")
