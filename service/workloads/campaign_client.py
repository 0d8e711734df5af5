"""A campaign's studies through the control plane's API: created, waited for, and read back as
each kernel's front and the layer's figure (service.workloads.campaign)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import httpx

from service.workloads.campaign import PER_TOKEN, PlannedStudy, layer_figure

DONE = ("completed", "failed", "cancelled")


class CampaignError(RuntimeError):
    pass


def _checked(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        raise CampaignError(f"{response.request.method} {response.request.url.path}: {response.status_code} "
                            f"{response.text[:800]}")
    return response.json()


def run(planned: Sequence[PlannedStudy], server: str, token: str, timeout: float,
        poll_s: float = 1.0) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=server.rstrip("/"), headers=headers, timeout=60) as client:
        ids = [_checked(client.post("/v1/studies", json=p.document))["id"] for p in planned]
        deadline = time.monotonic() + timeout
        states = {}
        while True:
            states = {i: _checked(client.get(f"/v1/studies/{i}")) for i in ids}
            if all(s["state"] in DONE and not s["progress"]["in_flight"] for s in states.values()):
                break
            if time.monotonic() > deadline:
                raise CampaignError(f"studies {', '.join(str(i) for i, s in states.items() if s['state'] not in DONE)} "
                                    f"did not finish in {timeout:g} s")
            time.sleep(poll_s)
        studies = [_summary(p, i, states[i]["state"], _checked(client.get(f"/v1/studies/{i}/front")))
                   for p, i in zip(planned, ids, strict=True)]
    return {"studies": studies, "layer": _layer(planned, studies)}


def _summary(planned: PlannedStudy, study_id: int, state: str, front: dict[str, Any]) -> dict[str, Any]:
    baseline = (front.get("baseline") or {}).get("values") or {}
    values = [t["values"][PER_TOKEN] for t in front["trials"] if PER_TOKEN in (t.get("values") or {})]
    return {"id": study_id, "name": planned.document["name"], "kernel": planned.kernel.name,
            "bucket": planned.bucket, "weight": planned.weight, "state": state, "front": len(front["trials"]),
            "front_trials": [{"number": t["number"], "config": t["config"], "values": t["values"]}
                             for t in front["trials"]],
            "baseline_per_token_us": baseline.get(PER_TOKEN), "best_per_token_us": min(values) if values else None}


def _layer(planned: Sequence[PlannedStudy], studies: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The layer's time per token, baselines and each study's best; None unless every study has both."""
    if any(s["baseline_per_token_us"] is None or s["best_per_token_us"] is None for s in studies):
        return None
    baseline = layer_figure([(p, s["baseline_per_token_us"]) for p, s in zip(planned, studies, strict=True)])
    tuned = layer_figure([(p, min(s["best_per_token_us"], s["baseline_per_token_us"]))
                          for p, s in zip(planned, studies, strict=True)])
    kernels = list(dict.fromkeys(p.kernel.name for p in planned))
    return {"kernels": kernels, "baseline_us": baseline[PER_TOKEN].value, "tuned_us": tuned[PER_TOKEN].value}
