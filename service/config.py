"""Settings read from the environment (PARETUNE_*), with the embedded defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from service.controls.catalog import configured_directory
from service.studies.limits import MAX_BODY_BYTES


def default_data_dir() -> Path:
    return Path(os.environ.get("PARETUNE_DATA_DIR", Path.cwd() / ".paretune"))


@dataclass(frozen=True)
class Settings:
    database_url: str
    redis_url: str | None = None
    data_dir: Path = field(default_factory=default_data_dir)
    lease_s: float = 60.0  # a lease lives this long without a heartbeat
    heartbeat_s: float = 10.0  # workers heartbeat this often
    reaper_interval_s: float = 2.0  # how often expired leases and wall-time limits are checked
    max_body_bytes: int = MAX_BODY_BYTES  # study documents and results larger than this are refused
    poll_interval_s: float = 0.5  # long-poll and event re-check period without Redis
    schedule_interval_s: float = 1.0  # how often each replica looks for studies whose step has work
    keep_alive_s: float = 75.0  # idle HTTP connections are kept this long (longer than clients keep them)
    auth_failure_limit: int = 20  # failed authentications per client per window before 429s
    auth_failure_window_s: float = 60.0
    migrate_on_start: bool = True  # false: a migration job upgrades the schema, replicas only check it
    db_pool_size: int = 30  # steady Postgres connections of one server process (10 more under load)
    scheduler_process: bool = False  # true: a scheduler process runs the studies' steps, not this one
    # the operator's CompileIQ search-space mirror (manifest.json and its binaries): docs/acf.md
    controls_catalog: Path | None = None

    @classmethod
    def from_env(cls) -> Settings:
        data_dir = default_data_dir()
        url = os.environ.get("PARETUNE_DATABASE_URL") or f"sqlite:///{data_dir / 'paretune.db'}"
        return cls(
            database_url=url,
            redis_url=os.environ.get("PARETUNE_REDIS_URL") or None,
            data_dir=data_dir,
            lease_s=float(os.environ.get("PARETUNE_LEASE_S", 60)),
            heartbeat_s=float(os.environ.get("PARETUNE_HEARTBEAT_S", 10)),
            reaper_interval_s=float(os.environ.get("PARETUNE_REAPER_INTERVAL_S", 2)),
            poll_interval_s=float(os.environ.get("PARETUNE_POLL_INTERVAL_S", 0.5)),
            schedule_interval_s=float(os.environ.get("PARETUNE_SCHEDULE_INTERVAL_S", 1.0)),
            auth_failure_limit=int(os.environ.get("PARETUNE_AUTH_FAILURE_LIMIT", 20)),
            migrate_on_start=os.environ.get("PARETUNE_MIGRATE_ON_START", "true").lower() not in ("0", "false", "no"),
            db_pool_size=int(os.environ.get("PARETUNE_DB_POOL_SIZE", 30)),
            scheduler_process=os.environ.get("PARETUNE_SCHEDULER_PROCESS", "false").lower() in ("1", "true", "yes"),
            controls_catalog=configured_directory(),
        )

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")
