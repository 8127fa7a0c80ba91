"""Kafka ACLs

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24

The `acls` table (one row per ACL binding) and the `acl_version` counter row that every
ACL change increments (metadata.security.acls).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "acls",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("resource_type", sa.Integer(), nullable=False),
        sa.Column("resource_name", sa.String(length=1024), nullable=False),
        sa.Column("pattern_type", sa.Integer(), nullable=False),
        sa.Column("principal", sa.String(length=1024), nullable=False),
        sa.Column("host", sa.String(length=1024), nullable=False),
        sa.Column("operation", sa.Integer(), nullable=False),
        sa.Column("permission", sa.Integer(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_acls")),
    )
    op.create_index(op.f("ix_acls_resource_type_resource_name"), "acls", ["resource_type", "resource_name"])
    sequences = sa.table("sequences", sa.column("name", sa.String), sa.column("next_value", sa.BigInteger))
    op.bulk_insert(sequences, [{"name": "acl_version", "next_value": 0}])


def downgrade() -> None:
    op.execute("DELETE FROM sequences WHERE name = 'acl_version'")
    op.drop_index(op.f("ix_acls_resource_type_resource_name"), table_name="acls")
    op.drop_table("acls")
