"""the queues' indexes hold queued rows alone: (pool, id) of the trials and validation jobs
queued, and (study_id, number) of a study's queued trials. The lease statement names the
state as a constant, so that whatever plan its prepared statement settles on reads these
indexes: a generic plan over (pool, state, id) with the state as a parameter could not tell
queued rows from the rest, and one chose a study's (study_id, number) index and read every
trial of the study up to its first queued one, at each lease

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

QUEUED = sa.text("state = 'queued'")


def upgrade() -> None:
    for table in ("trials", "validation_jobs"):
        op.drop_index(f"ix_{table}_queue", table_name=table)
        op.create_index(f"ix_{table}_queue", table, ["pool", "id"], postgresql_where=QUEUED, sqlite_where=QUEUED)
    op.create_index("ix_trials_study_queue", "trials", ["study_id", "number"],
                    postgresql_where=QUEUED, sqlite_where=QUEUED)


def downgrade() -> None:
    op.drop_index("ix_trials_study_queue", table_name="trials")
    for table in ("trials", "validation_jobs"):
        op.drop_index(f"ix_{table}_queue", table_name=table)
        op.create_index(f"ix_{table}_queue", table, ["pool", "state", "id"])
