"""pools: a pool's minimum trial isolation level

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pools",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("min_isolation", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("pools")
