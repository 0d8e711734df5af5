"""indexes for showing studies of 100,000 trials: (study_id, seq) carries what a plot reads
of each trial, so that a study's points are read from the index alone ((study_id, seq) is
unique: the other columns never take part in a comparison); (study_id, completed_index) for
the hypervolume's history; (study_id, on_front, number) for the front in order (SQLite read
every trial of the study through (study_id, number) rather than sort the front's)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

POINT_COLUMNS = ["state", "told", "number", "on_front", "feasible", "is_baseline", "values"]


def upgrade() -> None:
    op.drop_index("ix_trials_study_seq", table_name="trials")
    op.create_index("ix_trials_study_seq", "trials", ["study_id", "seq", *POINT_COLUMNS])
    op.create_index("ix_trials_study_completed", "trials", ["study_id", "completed_index"])
    op.drop_index("ix_trials_study_front", table_name="trials")
    op.create_index("ix_trials_study_front", "trials", ["study_id", "on_front", "number"])


def downgrade() -> None:
    op.drop_index("ix_trials_study_front", table_name="trials")
    op.create_index("ix_trials_study_front", "trials", ["study_id", "on_front"])
    op.drop_index("ix_trials_study_completed", table_name="trials")
    op.drop_index("ix_trials_study_seq", table_name="trials")
    op.create_index("ix_trials_study_seq", "trials", ["study_id", "seq"])
