"""The service's settings: one model, each field set from the environment as PARETUNE_<NAME>
(an empty value counts as unset), with the embedded defaults. docs/operations.md lists them;
tests/service/test_settings.py keeps that table in step with this model."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

from pydantic import AliasChoices, Field, ValidationError
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.studies.limits import MAX_BODY_BYTES

PREFIX = "PARETUNE_"


class SettingsError(ValueError):
    """An environment value that cannot be used, named with what its variable takes."""


def default_data_dir() -> Path:
    return Path.cwd() / ".paretune"


def embedded_database(settings: dict[str, Any]) -> str:
    return f"sqlite:///{settings['data_dir'] / 'paretune.db'}"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=PREFIX, env_ignore_empty=True, frozen=True, validate_by_name=True)

    data_dir: Path = Field(
        default_factory=default_data_dir, json_schema_extra={"shown_default": "`./.paretune`"},
        description="where the embedded SQLite file and the generated signing key live")
    database_url: str = Field(
        default_factory=embedded_database, json_schema_extra={"shown_default": "SQLite under the data dir"},
        description="the database")
    redis_url: str | None = Field(default=None, description="Redis for wake-ups and events")
    migrate_on_start: bool = Field(
        default=True,
        description="`false`: never migrate, refuse a database that is behind (team deployments; the images set it)")
    lease_s: float = Field(default=60.0, gt=0, description="a lease lives this long without a heartbeat (seconds)")
    heartbeat_s: float = Field(default=10.0, gt=0, description="workers heartbeat this often (seconds)")
    reaper_interval_s: float = Field(
        default=2.0, gt=0, description="how often expired leases and wall-time limits are checked (seconds)")
    poll_interval_s: float = Field(
        default=0.5, gt=0, description="database re-check period of long-polls and events without Redis (seconds)")
    schedule_interval_s: float = Field(
        default=1.0, gt=0, description="how often each replica looks for studies whose step has work (seconds)")
    step_gap_s: float = Field(
        default=0.05, ge=0,
        description="a study's scheduling steps start at least this far apart, so that the results which arrive "
        "in between are told and replaced in one step, unless a worker waits for what the step queues (seconds; "
        "0: a step per wake-up)")
    step_hold_s: float = Field(
        default=5.0, ge=0,
        description="while trials a study's step queued wait, its next step waits up to this long (at most half the "
        "time they would last at its pace), so that more results are told in one step; a worker that waits hurries it "
        "(seconds; 0: the gap only)")
    keep_alive_s: float = Field(
        default=75.0, gt=0,
        description="idle HTTP connections are kept this long, longer than clients keep them (seconds)")
    max_body_bytes: int = Field(
        default=MAX_BODY_BYTES, ge=1, description="study documents and results larger than this are refused (bytes)")
    auth_failure_limit: int = Field(
        default=20, ge=1, description="failed authentications per client address within "
        "`PARETUNE_AUTH_FAILURE_WINDOW_S` before 429s (docs/api.md)")
    auth_failure_window_s: float = Field(
        default=60.0, gt=0, description="the window in which failed authentications count (seconds)")
    db_pool_size: int = Field(
        default=30, ge=1,
        description="steady Postgres connections of one server process (up to 10 more under load)")
    sampler_cache: int = Field(
        default=1024, ge=1,
        description="studies whose sampler state one process keeps in memory; the step of a study past them "
                    "rebuilds its sampler from the database")
    scheduler_process: bool = Field(
        default=False,
        description="`true`: this server process steps no study; a `paretune scheduler` process does")
    controls_catalog: Path | None = Field(
        default=None, validation_alias=AliasChoices("PARETUNE_CONTROLS_CATALOG", "CIQ_SEARCH_SPACES_DIR"),
        description="the operator's CompileIQ search-space mirror (docs/acf.md); the service never downloads one")
    trial_retention_days: float | None = Field(
        default=None, gt=0,
        description="trials of studies finished longer ago than this are deleted, but for their front, baseline "
        "and candidates (days; none: kept)")
    signing_key_file: Path | None = Field(
        default=None, json_schema_extra={"shown_default": "`signing-key.pem` in the data dir, made on first use"},
        description="the artifact signing key, an Ed25519 PEM that every replica shares (docs/artifacts.md)")

    @classmethod
    def from_env(cls) -> Settings:
        """This process's settings; SettingsError names each variable whose value cannot be used."""
        try:
            return cls()
        except ValidationError as exc:
            raise SettingsError("\n".join(_explain(problem) for problem in exc.errors())) from None

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


def variables(name: str) -> tuple[str, ...]:
    """The environment variables that set field `name`, the service's own first."""
    alias = Settings.model_fields[name].validation_alias
    if isinstance(alias, AliasChoices):
        return tuple(map(str, alias.choices))
    return (PREFIX + name.upper(),)


_TAKES = ((bool, "true or false (also 1/0, yes/no, on/off)"), (int, "a whole number"), (float, "a number"),
          (Path, "a path"), (str, "text"))


def _explain(problem: ErrorDetails) -> str:
    name = next(field for field in Settings.model_fields if problem["loc"][0] in (field, *variables(field)))
    info = Settings.model_fields[name]
    takes = next(words for kind, words in _TAKES if info.annotation is kind or kind in get_args(info.annotation))
    message = problem["msg"][:1].lower() + problem["msg"][1:]
    return f"{variables(name)[0]}={problem['input']!r}: {message}; it takes {takes}: {info.description}"
