"""A Booster Pack of CompileIQ-generated ACFs for one kernel configuration, made on a CPU
machine through the product itself: the service on SQLite, two cpu workers, a compile-only
study (`sampler: compileiq`) of the built-in at a fixed Triton configuration, searching the
ACF for registers and machine-code size. The pack holds the ACFs of up to `--files` trials
whose compiled code differs from the baseline's and from each other's (registers, spills,
SASS size), the front's first; it is what a GPU study then searches (bench/gpu/acf_h200.py).

    python bench/acf_pack.py OUT.zip --builtin gemm_bf16 --config '{"BLOCK_M": 128, ...}' \\
        --dims '{"m": 4096, "n": 4096, "k": 4096}' [--trials 33] [--files 8]

Needs the acf extra and the operator's CompileIQ search-space catalog
(PARETUNE_CONTROLS_CATALOG, or ../shared/compileiq/search-spaces beside the repository).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from helpers import start_service, wait_for  # noqa: E402

from service.controls.packs import build  # noqa: E402

CATALOG = REPO.parent / "shared" / "compileiq" / "search-spaces"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--builtin", default="gemm_bf16")
    parser.add_argument("--config", type=json.loads, required=True, help="the Triton configuration (JSON)")
    parser.add_argument("--dims", type=json.loads, required=True, help="the workload shape (JSON)")
    parser.add_argument("--trials", type=int, default=33)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--seed", type=int, default=20261201)
    args = parser.parse_args()
    catalog = os.environ.get("PARETUNE_CONTROLS_CATALOG") or str(CATALOG)
    work = Path(tempfile.mkdtemp(prefix="paretune-acf-pack-"))
    service = start_service(f"sqlite:///{work / 'paretune.db'}", work, {"PARETUNE_CONTROLS_CATALOG": catalog})
    started = time.monotonic()
    try:
        token = service.make_worker_token("cpu")
        for name in ("a", "b"):
            service.start_worker(token, "--pool", "cpu", name=name)
        with service.client() as client:
            wait_for(lambda: len(client.get("/v1/workers").json()) >= 2, 120, "the workers")
            space = [{"name": k, "type": "categorical", "choices": [v]} for k, v in args.config.items()]
            space.append({"name": "acf", "type": "compiler_controls", "version": "13.3"})
            study = client.post("/v1/studies", json={
                "name": f"{args.builtin}: ACF pack", "pool": "cpu", "parallelism": 16,
                "kernel": {"backend": "triton", "builtin": args.builtin, "workload": [{"dims": args.dims}]},
                "space": space, "baseline": {**args.config, "acf": "none"}, "target": {"compute_capability": "9.0"},
                "objectives": ["registers", "sass_bytes"], "budget": {"max_trials": args.trials},
                "sampler": {"name": "compileiq", "seed": args.seed, "options": {"pool_size": 16}},
            })
            assert study.status_code == 201, study.text
            study_id = study.json()["id"]
            wait_for(lambda: client.get(f"/v1/studies/{study_id}").json()["state"] != "running", 900,
                     service.log_path)
            trials = client.get(f"/v1/studies/{study_id}/trials", params={"limit": 500}).json()["items"]
            chosen = choose(trials, args.files)
            files = {f"{args.builtin}-{sha[:12]}.acf": bytes.fromhex(_content(client, sha)) for sha in chosen}
    finally:
        service.stop()
    args.out.write_bytes(build(f"{args.builtin}-acfs", files, compiler="ptxas", version="13.3",
                               description=f"CompileIQ ACFs for {args.builtin} at {json.dumps(args.config)}"))
    print(json.dumps({"pack": str(args.out), "files": list(files), "trials": len(trials),
                      "seconds": round(time.monotonic() - started, 1)}))


def choose(trials: list[dict[str, Any]], limit: int) -> list[str]:
    """ACFs whose compiled code differs from the baseline's and each other's, front first."""
    done = [t for t in trials if t["state"] == "completed"]
    baseline = next(t for t in done if t["is_baseline"])

    def code(trial: dict[str, Any]) -> tuple[float, ...]:
        return tuple(trial["values"][k] for k in ("registers", "sass_bytes"))

    seen = {code(baseline)}
    chosen = []
    for trial in sorted(done, key=lambda t: (not t["on_front"], t["number"])):
        if trial["is_baseline"] or code(trial) in seen:
            continue
        seen.add(code(trial))
        chosen.append(trial["config"]["acf"])
        if len(chosen) == limit:
            break
    return chosen


def _content(client: Any, sha: str) -> str:
    import base64

    body = client.get(f"/v1/controls/files/{sha}", params={"content": "true"}).json()
    return base64.b64decode(body["content_base64"]).hex()


if __name__ == "__main__":
    main()
