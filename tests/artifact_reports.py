"""Validation reports as a worker posts them, scripted: rounds with a known ratio of each
candidate to the baseline (the reference the service's statistics are checked against)."""

from __future__ import annotations

import random
from typing import Any

TARGET = {"cpu": "Test CPU 9000", "machine": "x86_64", "cc": "gcc 12.2.0"}


def fingerprint(cc: str = TARGET["cc"], cpu: str = TARGET["cpu"]) -> dict[str, Any]:
    return {"backends": ["python"], "cpu_model": cpu, "machine": "x86_64", "compilers": {"cc": cc}}


def report(spec: dict[str, Any], ratios: dict[int, float], *, wrong: frozenset[int] = frozenset(),
           target: dict[str, Any] | None = None, seed: int = 0) -> dict[str, Any]:
    """A completed validation report: per round, the baseline's value near 1 and each
    candidate's near its ratio times that (a shared drift per round, 1% noise); `wrong`
    candidates fail correctness on the second shape and are not measured."""
    rng = random.Random(seed * 1000 + spec["job_id"])
    rounds, objectives = spec["rounds"], spec["objectives"]
    drift = [1.0 + 0.05 * rng.random() for _ in range(rounds)]
    shapes = [{"dims": {"n": 8}, "weight": 1.0}, {"dims": {"n": 13}, "weight": 1.0}]

    def outcome(candidate_id: int | None, ratio: float) -> dict[str, Any]:
        if candidate_id in wrong:
            return {"candidate_id": candidate_id, "status": "failed", "failure_reason": "wrong_result",
                    "message": "wrong result on shape n13", "correct": False,
                    "correctness": [{"dims": {"n": 8}, "passed": True},
                                    {"dims": {"n": 13}, "passed": False, "errors": {"rel_err": 0.4}}]}
        values = {o: [ratio * d * (1 + 0.01 * rng.gauss(0, 1)) for d in drift] for o in objectives}
        return {"candidate_id": candidate_id, "status": "ok", "correct": True, "values": values,
                "units": {o: "ms" for o in objectives},
                "correctness": [{"dims": s["dims"], "passed": True, "errors": {"rel_err": 1e-7}} for s in shapes]}

    ids = [c["candidate_id"] for c in spec["candidates"]]
    return {
        "status": "completed", "rounds": rounds, "shapes": shapes, "target": target or TARGET,
        "order": [[None, *ids] if r % 2 == 0 else [*ids, None] for r in range(rounds)],
        "baseline": outcome(None, 1.0), "candidates": [outcome(i, ratios.get(i, 1.0)) for i in ids],
        "fingerprint": {"hostname": f"fake-{spec['job_id']}", "cpu_model": (target or TARGET)["cpu"]},
    }
