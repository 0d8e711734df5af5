"""Schema upgrades with Alembic: `paretune db upgrade` (or the migration job), and the check
that a control plane started without migrating makes before it serves.

The scripts live in the repository's top-level migrations/ folder; a wheel carries a copy
inside this package (deploy/build_hooks.py puts it there), which is looked for first so that
an installed control plane never picks up an unrelated folder of the same name.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

log = logging.getLogger("paretune.service")

PACKAGED_DIR = Path(__file__).resolve().parent / "migrations"
REPOSITORY_DIR = Path(__file__).resolve().parents[2] / "migrations"


class SchemaNotReady(RuntimeError):
    """The database is behind this release (or empty) and this process may not migrate it."""


def migrations_dir() -> Path:
    for candidate in (PACKAGED_DIR, REPOSITORY_DIR):
        if (candidate / "env.py").is_file():
            return candidate
    raise RuntimeError(
        f"no Alembic migrations at {PACKAGED_DIR} or {REPOSITORY_DIR}: reinstall paretune from a wheel "
        "built by `pip wheel .` (it ships them) or run from a checkout of the repository"
    )


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(engine: Engine) -> None:
    cfg = alembic_config(str(engine.url.render_as_string(hide_password=False)))
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "head")


@dataclass(frozen=True)
class SchemaState:
    current: str | None  # the database's revision (None: no schema yet)
    head: str  # the newest revision this release knows
    known: bool  # whether `current` is one of this release's revisions

    @property
    def status(self) -> str:
        if self.current == self.head:
            return "current"
        if self.current is None or self.known:
            return "behind"
        return "ahead"  # migrated by a newer release


def schema_state(engine: Engine) -> SchemaState:
    scripts = ScriptDirectory(str(migrations_dir()))
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    head = scripts.get_current_head()
    assert head is not None, "the migrations folder has no revision"
    return SchemaState(current=current, head=head, known=_is_known(scripts, current))


def _is_known(scripts: ScriptDirectory, revision: str | None) -> bool:
    if revision is None:
        return False
    return any(script.revision == revision for script in scripts.walk_revisions())


def prepare_schema(engine: Engine, migrate: bool) -> None:
    """Upgrade (embedded default), or check that the migration job has run (a replica of a
    team deployment, PARETUNE_MIGRATE_ON_START=false): refuse to serve a database that is
    behind; serve one that a newer release migrated, since migrations only add to the schema
    (docs/operations.md, upgrades)."""
    if migrate:
        upgrade(engine)
        return
    state = schema_state(engine)
    if state.status == "behind":
        raise SchemaNotReady(
            f"the database schema is at {state.current or 'nothing'}, this release needs {state.head}: "
            "run `paretune db upgrade` (the migration job) before starting the control plane, "
            "or set PARETUNE_MIGRATE_ON_START=true"
        )
    if state.status == "ahead":
        log.warning("the database schema %s is newer than this release's %s; serving (migrations only add)",
                    state.current, state.head)
