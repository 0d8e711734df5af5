"""Migrations run once, by `paretune db upgrade`: a control plane started with
PARETUNE_MIGRATE_ON_START=false never migrates, refuses a database that is behind it with the
command to run, and serves one that a newer release migrated."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers import REPO, free_port, run_cli
from sqlalchemy import create_engine, inspect, text

from service.store import migrate


def test_a_checkout_runs_the_repository_migrations() -> None:
    assert not migrate.PACKAGED_DIR.exists(), "the wheel's copy is made at build time, never in the tree"
    assert migrate.migrations_dir() == REPO / "migrations"


def test_the_check_refuses_behind_and_serves_ahead(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'p.db'}")
    with pytest.raises(migrate.SchemaNotReady, match=r"paretune db upgrade"):
        migrate.prepare_schema(engine, migrate=False)
    assert not inspect(engine).get_table_names(), "the check must not create anything"
    migrate.prepare_schema(engine, migrate=True)
    state = migrate.schema_state(engine)
    assert state.status == "current" and state.current == state.head
    migrate.prepare_schema(engine, migrate=False)
    with engine.begin() as connection:  # as if a newer release had migrated it
        connection.execute(text("UPDATE alembic_version SET version_num = '9999_newer_release'"))
    assert migrate.schema_state(engine).status == "ahead"
    with caplog.at_level(logging.WARNING, logger="paretune.service"):
        migrate.prepare_schema(engine, migrate=False)
    assert "newer than this release" in caplog.text


def test_a_replica_refuses_an_unmigrated_database_and_the_cli_reports_it(tmp_path: Path) -> None:
    env = {"PARETUNE_DATABASE_URL": f"sqlite:///{tmp_path / 'p.db'}", "PARETUNE_MIGRATE_ON_START": "false"}
    served = run_cli("serve", "--port", str(free_port()), env=env, timeout=60)
    assert served.returncode != 0
    assert "this release needs" in served.stderr and "paretune db upgrade" in served.stderr
    behind = run_cli("db", "current", env=env)
    assert behind.returncode == 1 and "behind" in behind.stdout
    assert run_cli("db", "upgrade", env=env).returncode == 0
    current = run_cli("db", "current", env=env)
    assert current.returncode == 0 and ": current" in current.stdout


def test_the_build_ships_every_migration_and_refuses_a_tree_without_them(tmp_path: Path) -> None:
    from deploy.build_hooks import migration_files

    shipped = {p.as_posix() for p in migration_files()}
    scripts = {p.relative_to(REPO).as_posix() for p in (REPO / "migrations").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert scripts <= shipped and "migrations/script.py.mako" in shipped
    (tmp_path / "migrations").mkdir()
    with pytest.raises(RuntimeError, match="no Alembic environment"):
        migration_files(tmp_path)
