"""validation progress: the rounds a validation job has measured so far, the seconds each
took and when the count last grew, for rounds done and left and an ETA

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("validation_jobs") as batch:
        batch.add_column(sa.Column("rounds_done", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("round_s", Json, nullable=True))
        batch.add_column(sa.Column("progress_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("validation_jobs") as batch:
        batch.drop_column("progress_at")
        batch.drop_column("round_s")
        batch.drop_column("rounds_done")
