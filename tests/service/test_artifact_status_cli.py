"""`paretune artifact status` against a running service: a validation's rounds done and left
and its ETA (checked against the ETA computed here from the API's round durations and
stamp), `--watch` following it to its verdict, and an artifact's re-validations."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import yaml
from artifact_reports import report
from fake_worker import lease, register, run
from helpers import REPO, LiveService, run_cli
from test_cli import STUDY_YAML


def test_artifact_status_shows_rounds_eta_and_follows_to_the_verdict(live_sqlite_service: LiveService,
                                                                      tmp_path: Path) -> None:
    service = live_sqlite_service
    member, approver, other = (service.make_user_token(role) for role in ("member", "approver", "approver"))
    env = {"PARETUNE_SERVER": service.url, "PARETUNE_TOKEN": member, "COLUMNS": "200"}
    with service.client() as admin:
        study = admin.post("/v1/studies", json=yaml.safe_load(STUDY_YAML)).json()
    worker_token = service.make_worker_token()
    with httpx.Client(base_url=service.url, headers={"Authorization": f"Bearer {worker_token}"}) as worker:
        worker_id = register(worker)
        assert run(worker, worker_id, wait_s=2.0) == 8
        with service.client(member) as client:
            trials = client.get(f"/v1/studies/{study['id']}/trials").json()["items"]
            number = next(t["number"] for t in trials if not t["is_baseline"] and t["state"] == "completed")
            promoted = client.post(f"/v1/studies/{study['id']}/candidates", json={"trials": [number], "rounds": 6})
            candidate_id = promoted.json()["candidates"][0]["id"]
            validation_id = promoted.json()["validation"]["id"]

        queued = run_cli("artifact", "status", "--candidate", str(candidate_id), env=env)
        assert queued.returncode == 0, queued.stderr
        assert (f"validation {validation_id} (candidate {candidate_id}) queued: 0/6 rounds done, 6 left, "
                "ETA unknown until a round is timed") in queued.stdout
        assert "queued: 0/6 rounds" in queued.stdout  # its one job

        held = lease(worker, worker_id)
        assert held is not None
        beat = worker.post(f"/v1/leases/{held['token']}/heartbeat",
                           json={"phase": "round 3/6: baseline", "progress": {"round_s": [0.5, 1.5]}})
        assert beat.status_code == 200, beat.text
        running = run_cli("artifact", "status", "--validation", str(validation_id), env=env)
        assert running.returncode == 0, running.stderr
        with service.client(member) as client:
            job = client.get(f"/v1/validations/{validation_id}").json()["jobs"][0]
        # 4 rounds left at the mean of 0.5 s and 1.5 s, from the time the second round was reported
        eta_at = datetime.fromisoformat(job["progress_at"].replace("Z", "+00:00")) + timedelta(seconds=4 * 1.0)
        assert (f"validation {validation_id} running: 2/6 rounds done, 4 left, 1 s a round, ETA "
                in running.stdout), running.stdout
        assert f"(at {eta_at:%H:%M:%S} UTC)" in running.stdout
        assert f"job {job['id']} running on worker {worker_id}: 2/6 rounds (round 3/6: baseline)" in running.stdout

        watching = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "artifact", "status", "--candidate", str(candidate_id), "--watch",
             "--interval", "0.3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
            env={**service.env, **env})
        try:
            time.sleep(1.0)
            assert watching.poll() is None  # still following: the validation is running
            posted = worker.post(f"/v1/leases/{held['token']}/result", json=report(held["validation"], {
                candidate_id: 0.8}))
            assert posted.status_code == 200, posted.text
            out, errors = watching.communicate(timeout=60)
        finally:
            if watching.poll() is None:
                watching.kill()
                watching.wait()
    assert watching.returncode == 0, errors
    assert "6/6" in out  # the bar, full
    assert f"validation {validation_id} (candidate {candidate_id}) completed: 6/6 rounds done" in out
    assert f"candidate {candidate_id} validated: f1 x0.8" in out

    with service.client(approver) as client:
        version = client.post(f"/v1/candidates/{candidate_id}/approve", json={"why": "faster"}).json()
    with service.client(other) as client:
        again = client.post(f"/v1/artifacts/{version['artifact_id']}/revalidate", json={"rounds": 4}).json()
    artifact = run_cli("artifact", "status", str(version["artifact_id"]), env=env)
    assert artifact.returncode == 0, artifact.stderr
    assert f"artifact {version['artifact_id']}: " in artifact.stdout and ", v1 current" in artifact.stdout
    revalidation = again["candidates"][0]["id"]
    assert (f"validation {again['validation']['id']} (candidate {revalidation}) queued: 0/4 rounds done, 4 left"
            in artifact.stdout)

    neither = run_cli("artifact", "status", env=env)
    assert neither.returncode == 1 and "name one of" in neither.stderr
    missing = run_cli("artifact", "status", "--candidate", "999", env=env)
    assert missing.returncode == 1 and "404" in missing.stderr and "no candidate 999" in missing.stderr
