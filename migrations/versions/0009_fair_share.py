"""fair share: a study's priority class and weight, a pool's teams (weight, quotas) and the
usage decay half-life, GPU-seconds used per pool, study and hour

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("priority", sa.String(length=8), nullable=False, server_default="normal"))
        batch.add_column(sa.Column("weight", sa.Float(), nullable=False, server_default="1"))
    with op.batch_alter_table("pools") as batch:
        batch.add_column(sa.Column("usage_half_life_s", sa.Float(), nullable=False, server_default="3600"))
    op.create_table(
        "pool_teams",
        sa.Column("pool", sa.String(length=100), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("max_running", sa.Integer(), nullable=True),
        sa.Column("gpu_hours_per_day", sa.Float(), nullable=True),
        sa.Column("allow_urgent", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["pool"], ["pools.name"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("pool", "team_id"),
    )
    op.create_table(
        "pool_usage",
        sa.Column("pool", sa.String(length=100), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("gpu_s", sa.Float(), nullable=False),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("pool", "study_id", "hour"),
    )
    op.create_index("ix_pool_usage_hour", "pool_usage", ["hour"])


def downgrade() -> None:
    op.drop_index("ix_pool_usage_hour", table_name="pool_usage")
    op.drop_table("pool_usage")
    op.drop_table("pool_teams")
    with op.batch_alter_table("pools") as batch:
        batch.drop_column("usage_half_life_s")
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("weight")
        batch.drop_column("priority")
