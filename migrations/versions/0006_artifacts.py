"""artifacts: candidates, validations and their jobs, artifacts, immutable signed versions,
the audit log; a pool's auto re-validation setting

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
IMMUTABLE = "an approved artifact version cannot be changed (document, file, sha256, signature)"


def _now() -> sa.Column:
    return sa.Column("created_at", sa.DateTime(timezone=True), nullable=False)


def upgrade() -> None:
    with op.batch_alter_table("pools") as batch:
        batch.add_column(sa.Column("auto_revalidate", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        "candidates",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("studies.id", ondelete="CASCADE"), nullable=False),
        sa.Column("team_id", sa.Integer(), sa.ForeignKey("teams.id"), nullable=False, index=True),
        sa.Column("trial_id", BigId, sa.ForeignKey("trials.id", ondelete="CASCADE"), nullable=False),
        sa.Column("trial_number", sa.Integer(), nullable=False),
        sa.Column("config", Json, nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("promoted_by", sa.Integer(), sa.ForeignKey("api_tokens.id"), nullable=True),
        sa.Column("promoted_by_name", sa.String(200), nullable=False),
        sa.Column("validation_id", sa.Integer(), nullable=True),
        sa.Column("artifact_id", sa.Integer(), nullable=True),
        sa.Column("version_id", sa.Integer(), nullable=True),
        sa.Column("decided_by_name", sa.String(200), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        _now(),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_candidates_study", "candidates", ["study_id", "id"])
    op.create_table(
        "validations",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("studies.id", ondelete="CASCADE"), nullable=False,
                  index=True),
        sa.Column("team_id", sa.Integer(), sa.ForeignKey("teams.id"), nullable=False, index=True),
        sa.Column("pool", sa.String(100), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("candidate_ids", Json, nullable=False),
        sa.Column("baseline", Json, nullable=False),
        sa.Column("rounds", sa.Integer(), nullable=False),
        sa.Column("jobs", sa.Integer(), nullable=False),
        sa.Column("results", Json, nullable=True),
        sa.Column("target", Json, nullable=True),
        sa.Column("fingerprints", Json, nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("requested_by_name", sa.String(200), nullable=False),
        _now(),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "validation_jobs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("validation_id", sa.Integer(), sa.ForeignKey("validations.id", ondelete="CASCADE"),
                  nullable=False, index=True),
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("studies.id", ondelete="CASCADE"), nullable=False),
        sa.Column("pool", sa.String(100), nullable=False),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("requires_energy", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("spec", Json, nullable=False),
        sa.Column("rounds", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("lease_token", sa.String(64), nullable=True, unique=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("phase", sa.String(32), nullable=True),
        sa.Column("worker_id", sa.Integer(), sa.ForeignKey("workers.id"), nullable=True),
        sa.Column("report", Json, nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        _now(),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_validation_jobs_queue", "validation_jobs", ["pool", "state", "id"])
    op.create_table(
        "artifacts",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("team_id", sa.Integer(), sa.ForeignKey("teams.id"), nullable=False, index=True),
        sa.Column("kernel", sa.String(200), nullable=False, index=True),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("pool", sa.String(100), nullable=False),
        sa.Column("target", Json, nullable=False),
        sa.Column("target_key", sa.String(64), nullable=False),
        sa.Column("gpu", sa.String(200), nullable=True),
        sa.Column("current_version", sa.Integer(), nullable=True),
        sa.Column("stale", sa.Boolean(), nullable=False),
        sa.Column("stale_reason", sa.Text(), nullable=True),
        _now(),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("team_id", "kernel", "target_key", name="uq_artifacts_kernel_target"),
    )
    op.create_table(
        "artifact_versions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("artifact_id", sa.Integer(), sa.ForeignKey("artifacts.id", ondelete="CASCADE"), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("candidate_id", sa.Integer(), nullable=True),
        sa.Column("validation_id", sa.Integer(), nullable=True),
        sa.Column("document", Json, nullable=False),
        sa.Column("file", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("signature", Json, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("stale", sa.Boolean(), nullable=False),
        sa.Column("approved_by_name", sa.String(200), nullable=False),
        sa.Column("approved_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("artifact_id", "version", name="uq_artifact_versions_version"),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("team_id", sa.Integer(), sa.ForeignKey("teams.id"), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("actor_token_id", sa.Integer(), nullable=True),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("subject_type", sa.String(16), nullable=False),
        sa.Column("subject_id", sa.Integer(), nullable=False),
        sa.Column("why", sa.Text(), nullable=False),
        sa.Column("details", Json, nullable=False),
    )
    op.create_index("ix_audit_team_id", "audit_log", ["team_id", "id"])
    _immutable_versions()


def _immutable_versions() -> None:
    """The database itself refuses to change a version's signed content."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"""
            CREATE FUNCTION artifact_version_immutable() RETURNS trigger AS $$
            BEGIN
                IF NEW.document::text IS DISTINCT FROM OLD.document::text OR NEW.file IS DISTINCT FROM OLD.file
                   OR NEW.sha256 IS DISTINCT FROM OLD.sha256 OR NEW.signature::text IS DISTINCT FROM OLD.signature::text
                   OR NEW.version IS DISTINCT FROM OLD.version OR NEW.artifact_id IS DISTINCT FROM OLD.artifact_id THEN
                    RAISE EXCEPTION '{IMMUTABLE}' USING ERRCODE = 'check_violation';
                END IF;
                RETURN NEW;
            END;
            $$ LANGUAGE plpgsql""")
        op.execute("""
            CREATE TRIGGER artifact_versions_immutable BEFORE UPDATE ON artifact_versions
            FOR EACH ROW EXECUTE FUNCTION artifact_version_immutable()""")
    else:
        op.execute(f"""
            CREATE TRIGGER artifact_versions_immutable BEFORE UPDATE OF document, file, sha256, signature, version,
                artifact_id ON artifact_versions
            WHEN NEW.document IS NOT OLD.document OR NEW.file IS NOT OLD.file OR NEW.sha256 IS NOT OLD.sha256
                 OR NEW.signature IS NOT OLD.signature OR NEW.version IS NOT OLD.version
                 OR NEW.artifact_id IS NOT OLD.artifact_id
            BEGIN SELECT RAISE(ABORT, '{IMMUTABLE}'); END""")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS artifact_versions_immutable ON artifact_versions")
        op.execute("DROP FUNCTION IF EXISTS artifact_version_immutable()")
    for table in ("audit_log", "artifact_versions", "artifacts", "validation_jobs", "validations", "candidates"):
        op.drop_table(table)
    with op.batch_alter_table("pools") as batch:
        batch.drop_column("auto_revalidate")
