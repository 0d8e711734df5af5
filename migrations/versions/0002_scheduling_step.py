"""scheduling step: trials the step has accounted for, a change sequence on studies

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

BigInt = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("told", sa.Boolean(), nullable=False, server_default=sa.false()))
    # trials finished before this revision were accounted for when their result arrived
    op.execute("UPDATE trials SET told = true WHERE state IN ('completed', 'failed', 'cancelled')")
    op.create_index(
        "ix_trials_untold", "trials", ["study_id"],
        postgresql_where=sa.text("NOT told"), sqlite_where=sa.text("NOT told"),
    )
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("seq", BigInt, nullable=False, server_default="0"))
    # counted from the trials table when workers are listed; a result no longer writes the worker row
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("trials_done")


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("trials_done", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("seq")
    op.drop_index("ix_trials_untold", table_name="trials")
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("told")
