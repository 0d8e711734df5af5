"""The Dockerfiles, checked without a container engine: Docker's parser reads them, the rules
of issue 14 are checked per deliverable stage, and hadolint lints them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import dockerfile
import pytest
from dockerfiles import Stage, chain, effective, stages
from helpers import REPO

DOCKERFILE = REPO / "Dockerfile"
GPU_DOCKERFILE = REPO / "deploy" / "gpu-worker.Dockerfile"
# What each file delivers: the stages people build and run.
DELIVERABLES = {DOCKERFILE: ["control-plane", "cpu-worker"], GPU_DOCKERFILE: ["gpu-worker"]}


def _all_runs(all_stages: dict[str, Stage], name: str) -> str:
    return "\n".join(run for stage in chain(all_stages, name) for run in stage.runs())


@pytest.mark.parametrize("path", list(DELIVERABLES), ids=lambda p: p.name)
def test_multi_stage_non_root_wheel_installs(path: Path) -> None:
    all_stages = stages(path)
    assert len(all_stages) >= 2, "build the wheel in its own stage"
    names = list(all_stages)
    if path == DOCKERFILE:
        assert names[-1] == "control-plane", "a plain `docker build .` must give the control plane"
    every_run = "\n".join(run for stage in all_stages.values() for run in stage.runs())
    assert "pip wheel" in every_run
    for stage in all_stages.values():
        for run in stage.runs():
            if "pip install" in run:
                words = run.split()
                assert "-e" not in words and "--editable" not in words, f"editable install in {stage.name}: {run}"
                assert ".whl" in run, f"{stage.name} installs something other than the built wheel: {run}"
    for name in DELIVERABLES[path]:
        user = effective(all_stages, name, "USER")
        assert user is not None, f"stage {name} runs as root (no USER)"
        uid = user[0].split(":")[0]
        assert uid not in ("root", "0") and uid.isdigit(), f"stage {name}: USER {uid} (numeric, not root)"
        # the last USER of the stage itself comes after every RUN that needs root
        own = all_stages[name].instructions
        last_user = max((i for i, c in enumerate(own) if c.cmd == "USER"), default=-1)
        assert all(c.cmd != "RUN" for c in own[last_user + 1:]), f"stage {name} runs commands after USER"
        assert effective(all_stages, name, "CMD"), f"stage {name} has no CMD"


def test_control_plane_stage_checks_health_and_does_not_migrate() -> None:
    all_stages = stages(DOCKERFILE)
    health = effective(all_stages, "control-plane", "HEALTHCHECK")
    assert health is not None and "/healthz" in " ".join(health)
    assert effective(all_stages, "control-plane", "CMD")[:2] == ("paretune", "serve")
    envs = " ".join(" ".join(v) for stage in chain(all_stages, "control-plane") for v in stage.values("ENV"))
    assert "PARETUNE_MIGRATE_ON_START" in envs and "false" in envs
    service_install = _all_runs(all_stages, "service-venv")
    assert "[service]" in service_install


def test_worker_images_carry_no_control_plane_and_reap_children() -> None:
    cpu = stages(DOCKERFILE)
    copies = [c.flags for c in cpu["cpu-worker"].instructions if c.cmd == "COPY"]
    assert ("--from=worker-venv",) in copies and ("--from=service-venv",) not in copies
    assert "[service]" not in _all_runs(cpu, "worker-venv")
    gpu = stages(GPU_DOCKERFILE)
    assert gpu["gpu-worker"].base == "${CUDA_IMAGE}"
    arguments = [c.value[0] for c in dockerfile.parse_file(str(GPU_DOCKERFILE)) if c.cmd == "ARG"]
    assert any(a.startswith("CUDA_IMAGE=nvidia/cuda:") for a in arguments), arguments
    assert "[gpu]" in _all_runs(gpu, "gpu-worker") and "[service]" not in _all_runs(gpu, "gpu-worker")
    for all_stages, name in ((cpu, "cpu-worker"), (gpu, "gpu-worker")):
        assert effective(all_stages, name, "ENTRYPOINT")[:2] == ("tini", "--"), name


def test_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    # DL3008 (pin apt package versions): the base image tag pins the distribution release,
    # and its packages should follow that release's security updates.
    out = subprocess.run([hadolint, "--ignore", "DL3008", "--no-color", str(DOCKERFILE), str(GPU_DOCKERFILE)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
