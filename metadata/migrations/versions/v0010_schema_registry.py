"""the schema registry's tables

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28

Schemas by global id, subjects' versions and the compatibility/mode settings of the schema
registry (metadata.schemas; tables documented in metadata.schema).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "registry_schemas",
        sa.Column("schema_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("schema_type", sa.String(16), nullable=False),
        sa.Column("schema_text", sa.Text(), nullable=False),
        sa.Column("references", sa.JSON(), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("schema_id", name=op.f("pk_registry_schemas")),
        sa.UniqueConstraint("fingerprint", name=op.f("uq_registry_schemas_fingerprint")),
    )
    op.create_table(
        "registry_versions",
        sa.Column("subject", sa.String(1024), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("schema_id", sa.Integer(), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["schema_id"],
            ["registry_schemas.schema_id"],
            name=op.f("fk_registry_versions_schema_id_registry_schemas"),
        ),
        sa.PrimaryKeyConstraint("subject", "version", name=op.f("pk_registry_versions")),
    )
    op.create_index(op.f("ix_registry_versions_schema_id"), "registry_versions", ["schema_id"])
    op.create_table(
        "registry_settings",
        sa.Column("subject", sa.String(1024), nullable=False),
        sa.Column("compatibility", sa.String(32), nullable=True),
        sa.Column("normalize", sa.Boolean(), nullable=True),
        sa.Column("mode", sa.String(16), nullable=True),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("subject", name=op.f("pk_registry_settings")),
    )


def downgrade() -> None:
    op.drop_table("registry_settings")
    op.drop_index(op.f("ix_registry_versions_schema_id"), table_name="registry_versions")
    op.drop_table("registry_versions")
    op.drop_table("registry_schemas")
