"""screening: a trial's measurement stage and its screening result; screened-out trials counted

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("stage", sa.String(8), nullable=True))
        batch.add_column(sa.Column("screening", Json, nullable=True))
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("n_screened_out", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("n_screened_out")
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("screening")
        batch.drop_column("stage")
