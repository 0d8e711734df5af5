"""trials by (told, state, study_id) instead of the partial index of untold trials: SQLite's
planner, which has no statistics, read every finished trial of a study through its
(study_id, state) index to find the few untold ones (a scheduling step of a 100,000-trial
study took a second); an index that matches every equality of those queries is chosen by
either database without statistics

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_trials_untold", table_name="trials")
    op.create_index("ix_trials_told", "trials", ["told", "state", "study_id"])


def downgrade() -> None:
    op.drop_index("ix_trials_told", table_name="trials")
    op.create_index(
        "ix_trials_untold", "trials", ["study_id"],
        postgresql_where=sa.text("NOT told"), sqlite_where=sa.text("NOT told"),
    )
