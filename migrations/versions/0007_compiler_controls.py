"""compiler controls: Advanced Controls Files and Booster Packs, CompileIQ's checkpoints,
trials and validation jobs that need a GPU, a pool's toolchain

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
GPU_BACKENDS = "('triton', 'cuda')"


def upgrade() -> None:
    for table in ("trials", "validation_jobs"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("requires_gpu", sa.Boolean(), nullable=False, server_default=sa.false()))
        # every GPU trial so far ran on its GPU
        op.execute(f"UPDATE {table} SET requires_gpu = true WHERE backend IN {GPU_BACKENDS}")
    with op.batch_alter_table("pools") as batch:
        batch.add_column(sa.Column("toolchain", sa.String(32), nullable=True))
    op.create_table(
        "controls_files",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("compiler", sa.String(16), nullable=False),
        sa.Column("version", sa.String(16), nullable=False),
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "controls_packs",
        sa.Column("pack_id", sa.String(100), primary_key=True),
        sa.Column("display_name", sa.String(200), nullable=False),
        sa.Column("compiler", sa.String(16), nullable=False),
        sa.Column("version", sa.String(16), nullable=False),
        sa.Column("manifest", Json, nullable=False),
        sa.Column("zip_sha256", sa.String(64), nullable=False),
        sa.Column("imported_by_name", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "controls_pack_files",
        sa.Column("pack_id", sa.String(100), sa.ForeignKey("controls_packs.pack_id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("filename", sa.String(200), primary_key=True),
        sa.Column("sha256", sa.String(64), sa.ForeignKey("controls_files.sha256"), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
    )
    op.create_table(
        "sampler_checkpoints",
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("studies.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("state", sa.LargeBinary(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("sampler_checkpoints")
    op.drop_table("controls_pack_files")
    op.drop_table("controls_packs")
    op.drop_table("controls_files")
    with op.batch_alter_table("pools") as batch:
        batch.drop_column("toolchain")
    for table in ("trials", "validation_jobs"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("requires_gpu")
