"""agents report whether they are ready

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25

Each agent row carries the agent's readiness at its last heartbeat (agent.health: its bucket
is writable and readable, metadata answers); routing leaves agents that are not ready out.
Rows written before (and agents that do not send the flag) are ready.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("ready", sa.Boolean(), server_default=sa.true(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("ready")
