"""The agent's settings: one model that every setting of the environment reaches, that the
`worker` command only overrides, and that an agent started as a process reads as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from wire.contract import SandboxLimits
from workers.agent.settings import SETTINGS_ON_STDIN, AgentSettings
from workers.cli import TOKEN_ENV, _settings

# every field, as the environment writes it, and what it becomes
FROM_ENVIRONMENT = {
    "SERVER": ("http://control:8000", "http://control:8000"),
    "TOKEN": ("ptw_secret", "ptw_secret"),
    "POOL": ("h200", "h200"),
    "NAME": ("gpu0", "gpu0"),
    "KINDS": ("trial, validation", ["trial", "validation"]),
    "CACHE_DIR": ("/var/cache/pt", Path("/var/cache/pt")),
    "CACHE_MAX_BYTES": ("1024", 1024),
    "PREFETCH": ("off", False),
    "LEASE_AHEAD": ("2", 2),
    "COMPILERS": ("2", 2),
    "MAX_TRIALS": ("7", 7),
    "BACKENDS": ("triton,cuda", ["triton", "cuda"]),
    "WAIT_S": ("2.5", 2.5),
    "DRAIN_TIMEOUT_S": ("5", 5.0),
    "MEASURE_CPUS": ("16-18,20", [16, 17, 18, 20]),
    "COMPILE_CPUS": ('[1, 2]', [1, 2]),
    "WARM_RUNNER": ("no", False),
    "GPU": ("3", 3),
    "RUNNER_START_TIMEOUT_S": ("60", 60.0),
    "IDLE_RUNNERS": ("1", 1),
    "ISOLATION": ("user", "user"),
    "SANDBOX_UID": ("61000", 61000),
    "BWRAP": ("/usr/bin/bwrap", "/usr/bin/bwrap"),
    "LIMITS": ('{"memory_mb": 4096}', SandboxLimits(memory_mb=4096)),
    "PYTHON_PATHS": ("/opt/a:/opt/b", [Path("/opt/a"), Path("/opt/b")]),
    "WORK_DIR": ("/scratch", Path("/scratch")),
    "PRIVATE_PATHS": ("/etc/pt", [Path("/etc/pt")]),
    "OWN_PROCESS": ("1", True),
    "TOOLCHAIN": ("13.3", "13.3"),
}


def test_every_setting_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(FROM_ENVIRONMENT) == {name.upper() for name in AgentSettings.model_fields}
    for name, (text, _) in FROM_ENVIRONMENT.items():
        monkeypatch.setenv(f"PARETUNE_WORKER_{name}", text)
    settings = AgentSettings()
    for name, (_, value) in FROM_ENVIRONMENT.items():
        assert getattr(settings, name.lower()) == value, name


def test_the_names_of_earlier_releases_and_single_caps_still_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARETUNE_SERVER", "http://old:1")
    monkeypatch.setenv("PARETUNE_TOOLCHAIN", "13.0")
    monkeypatch.setenv("PARETUNE_WORKER_LIMITS__CPU_S", "60")
    monkeypatch.setenv("PARETUNE_WORKER_PREFETCH", "on")
    settings = AgentSettings()
    assert (settings.server, settings.toolchain, settings.limits.cpu_s, settings.prefetch) == ("http://old:1", "13.0",
                                                                                              60, True)
    monkeypatch.setenv("PARETUNE_WORKER_PREFETCH", "maybe")
    with pytest.raises(ValueError, match="prefetch"):
        AgentSettings()


def test_options_override_the_environment_and_are_checked_by_the_model(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    monkeypatch.setenv("PARETUNE_WORKER_POOL", "from-env")
    monkeypatch.setenv("PARETUNE_WORKER_LIMITS__MEMORY_MB", "4096")
    monkeypatch.setenv(TOKEN_ENV, "ptw_env")
    token_file = tmp_path / "token"
    token_file.write_text("ptw_file\n")
    settings = _settings({"pool": "given", "max_cpu_s": 30, "measure_cpus": "2-3", "token_file": token_file})
    assert (settings.pool, settings.limits, settings.measure_cpus) == ("given", SandboxLimits(memory_mb=4096, cpu_s=30),
                                                                       [2, 3])
    assert settings.token == "ptw_file" and settings.private_paths == [token_file] and settings.own_process
    assert TOKEN_ENV not in __import__("os").environ  # no child process inherits it
    with pytest.raises(typer.BadParameter, match="lease_ahead"):
        _settings({"token": "ptw_x", "lease_ahead": 9})


def test_a_launched_agent_reads_its_settings_on_stdin(tmp_path: Path) -> None:
    """`python -m workers --settings-stdin` takes what start_agent_process writes: here an
    agent that cannot run (no backend by that name) says so, naming what it was given."""
    settings = AgentSettings(server="http://127.0.0.1:9", token="ptw_secret", backends=["no-such-backend"],
                             cache_dir=tmp_path / "cache", isolation="none", pool="stdin-pool")
    done = subprocess.run([sys.executable, "-m", "workers", SETTINGS_ON_STDIN], input=settings.launch_json() + "\n",
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 2, done.stderr
    assert "no-such-backend" in done.stderr and "ptw_secret" not in done.stderr
    assert json.loads(settings.launch_json())["pool"] == "stdin-pool"
