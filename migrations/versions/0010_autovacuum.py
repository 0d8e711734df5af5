"""autovacuum of the hot tables on Postgres: trials and validation jobs are updated several
times per unit (lease, report, accounting), studies on every step, pool_usage on every step
that accounts: vacuum them after 2% of their rows changed instead of 20%, and without the
cost delay, so that dead tuples stay a small, flat fraction (docs/operations.md has the
measured curve)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

HOT = ("trials", "studies", "validation_jobs", "pool_usage")
SETTINGS = ("autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000, "
            "autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in HOT:
        op.execute(f"ALTER TABLE {table} SET ({SETTINGS})")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in HOT:
        op.execute(f"ALTER TABLE {table} RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, "
                   "autovacuum_analyze_scale_factor, autovacuum_vacuum_cost_delay)")
