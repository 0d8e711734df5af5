"""The service's settings: every field from the environment, one boolean parser, a bad value
named at start, and docs/operations.md's table generated from the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import REPO, run_cli
from pydantic.fields import FieldInfo

from service.config import Settings, SettingsError, variables

# a value other than the default for every field, as the environment spells it
SAMPLES: dict[str, tuple[str, Any]] = {
    "data_dir": ("/srv/paretune", Path("/srv/paretune")),
    "database_url": ("postgresql://paretune@db:5432/paretune", "postgresql://paretune@db:5432/paretune"),
    "redis_url": ("redis://cache:6379/1", "redis://cache:6379/1"),
    "migrate_on_start": ("false", False),
    "lease_s": ("90", 90.0),
    "heartbeat_s": ("2.5", 2.5),
    "reaper_interval_s": ("4", 4.0),
    "poll_interval_s": ("0.25", 0.25),
    "schedule_interval_s": ("3", 3.0),
    "step_gap_s": ("0.2", 0.2),
    "step_hold_s": ("1.5", 1.5),
    "keep_alive_s": ("120", 120.0),
    "max_body_bytes": ("2000000", 2_000_000),
    "auth_failure_limit": ("5", 5),
    "auth_failure_window_s": ("30", 30.0),
    "db_pool_size": ("12", 12),
    "sampler_cache": ("2048", 2048),
    "scheduler_process": ("true", True),
    "controls_catalog": ("/srv/compileiq", Path("/srv/compileiq")),
    "trial_retention_days": ("30", 30.0),
    "signing_key_file": ("/etc/paretune/signing-key.pem", Path("/etc/paretune/signing-key.pem")),
}


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No setting in the environment, and a working directory of the test's own."""
    for name in Settings.model_fields:
        for variable in variables(name):
            monkeypatch.delenv(variable, raising=False)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def test_every_setting_has_a_sample() -> None:
    assert SAMPLES.keys() == Settings.model_fields.keys()


@pytest.mark.parametrize("name", SAMPLES)
def test_every_setting_is_read_from_the_environment(environment: pytest.MonkeyPatch, name: str) -> None:
    spelled, expected = SAMPLES[name]
    assert getattr(Settings.from_env(), name) != expected
    environment.setenv(variables(name)[0], spelled)
    assert getattr(Settings.from_env(), name) == expected


def test_defaults_and_empty_values(environment: pytest.MonkeyPatch, tmp_path: Path) -> None:
    defaults = Settings.from_env()
    assert defaults.data_dir == tmp_path / ".paretune"
    assert defaults.database_url == f"sqlite:///{tmp_path / '.paretune' / 'paretune.db'}" and defaults.is_sqlite
    assert (defaults.lease_s, defaults.db_pool_size, defaults.migrate_on_start) == (60.0, 30, True)
    for name in Settings.model_fields:  # an empty value is no value
        environment.setenv(variables(name)[0], "")
    assert Settings.from_env() == defaults


def test_the_embedded_database_follows_the_data_dir(environment: pytest.MonkeyPatch, tmp_path: Path) -> None:
    environment.setenv("PARETUNE_DATA_DIR", str(tmp_path / "elsewhere"))
    assert Settings.from_env().database_url == f"sqlite:///{tmp_path / 'elsewhere' / 'paretune.db'}"
    assert Settings(data_dir=tmp_path / "given").database_url == f"sqlite:///{tmp_path / 'given' / 'paretune.db'}"


def test_the_catalog_falls_back_to_compileiqs_variable(environment: pytest.MonkeyPatch) -> None:
    environment.setenv("CIQ_SEARCH_SPACES_DIR", "/srv/ciq")
    assert Settings.from_env().controls_catalog == Path("/srv/ciq")
    environment.setenv("PARETUNE_CONTROLS_CATALOG", "/srv/paretune-catalog")
    assert Settings.from_env().controls_catalog == Path("/srv/paretune-catalog")
    assert Settings(controls_catalog=Path("/given")).controls_catalog == Path("/given")


@pytest.mark.parametrize(
    ("spelling", "value"),
    [("1", True), ("true", True), ("True", True), ("YES", True), ("y", True), ("on", True), ("t", True),
     ("0", False), ("false", False), ("FALSE", False), ("no", False), ("n", False), ("off", False),
     ("Off", False), ("f", False)],
)
@pytest.mark.parametrize("name", ["migrate_on_start", "scheduler_process"])
def test_one_boolean_parser(environment: pytest.MonkeyPatch, name: str, spelling: str, value: bool) -> None:
    environment.setenv(variables(name)[0], spelling)
    assert getattr(Settings.from_env(), name) is value


@pytest.mark.parametrize("spelling", ["maybe", "2", "enabled", "tru"])
@pytest.mark.parametrize("name", ["migrate_on_start", "scheduler_process"])
def test_a_boolean_that_is_neither_is_refused(environment: pytest.MonkeyPatch, name: str, spelling: str) -> None:
    variable = variables(name)[0]
    environment.setenv(variable, spelling)
    with pytest.raises(SettingsError, match=rf"^{variable}='{spelling}': .* it takes true or false"):
        Settings.from_env()


def test_bad_values_are_named_with_what_they_take(environment: pytest.MonkeyPatch) -> None:
    environment.setenv("PARETUNE_LEASE_S", "a minute")
    environment.setenv("PARETUNE_DB_POOL_SIZE", "0")
    with pytest.raises(SettingsError) as refused:
        Settings.from_env()
    message = str(refused.value)
    assert "PARETUNE_LEASE_S='a minute': input should be a valid number" in message
    assert "it takes a number: a lease lives this long without a heartbeat (seconds)" in message
    assert "PARETUNE_DB_POOL_SIZE='0': input should be greater than or equal to 1; it takes a whole number" in message


def test_the_service_refuses_to_start_on_a_bad_value(tmp_path: Path) -> None:
    out = run_cli("serve", env={"PARETUNE_DATA_DIR": str(tmp_path), "PARETUNE_HEARTBEAT_S": "-1"}, timeout=60)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "error: PARETUNE_HEARTBEAT_S='-1': input should be greater than 0; it takes a number" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "paretune.db").exists()


def _shown_default(info: FieldInfo) -> str:
    extra = info.json_schema_extra
    if isinstance(extra, dict) and "shown_default" in extra:
        return str(extra["shown_default"])
    value = info.default
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"{value:g}" if isinstance(value, float) else f"{value:,}"


def settings_table() -> str:
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for name, info in Settings.model_fields.items():
        first, *others = variables(name)
        variable = f"`{first}`" + "".join(f" (or `{other}`)" for other in others)
        rows.append(f"| {variable} | {_shown_default(info)} | {info.description} |")
    return "\n".join(rows) + "\n"


def test_the_operations_guide_lists_every_setting() -> None:
    guide = (REPO / "docs" / "operations.md").read_text()
    section = guide.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    documented = section[section.index("| variable |"):]
    documented = documented[:documented.index("\n\n") + 1]
    assert documented == settings_table(), f"docs/operations.md's settings table should read:\n{settings_table()}"
