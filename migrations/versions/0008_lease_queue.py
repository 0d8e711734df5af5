"""one lease queue: validation jobs get the expiry index trials have; a worker names the
kinds of leased work it runs

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_index("ix_validation_jobs_expiry", "validation_jobs", ["state", "lease_expires_at"])
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("kinds", Json, nullable=True))  # null: trials and validation jobs


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("kinds")
    op.drop_index("ix_validation_jobs_expiry", table_name="validation_jobs")
