"""studies.trials_pruned_at: when retention deleted the last of a finished study's trials it
deletes, so that retention reads the studies it has left (through an index), never the trials
of studies it is done with: it had looked for deletable trials across the whole table every
upkeep, a scan that grew with every study kept

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("studies", sa.Column("trials_pruned_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_studies_retention", "studies", ["trials_pruned_at", "finished_at"])


def downgrade() -> None:
    op.drop_index("ix_studies_retention", table_name="studies")
    op.drop_column("studies", "trials_pruned_at")
