"""paretune against CompileIQ's own Search on the same problem, on a CPU machine: the same PTX
(the built-in attention forward lowered by Triton for sm_90a at a configuration that spills),
the same objective (spill bytes, minimised; a refused or failed ACF is INVALID_SCORE), the
same budget (generations x pool size candidates, the same engine seed) through
  (a) CompileIQ's Search with its process workers (WorkerTypes.NATIVE), 1 and 2 processes,
      each evaluation running ptxas 13.3 with the candidate's ACF;
  (b) paretune: the service on SQLite, `sampler: compileiq`, a `backend: ptx` study of that PTX,
      1 and 2 `paretune worker`s (each evaluation a trial through the lease queue, in the
      worker's sandbox).
Printed as a table and written to OUT (JSON): wall time from the start of the search to its
end (for paretune the study's own, from its creation to its end as the service recorded
them), the best spill bytes, evaluations, and for paretune the ACFs stored with their trials and
the service's CPU seconds per trial.

    python bench/acf_anchor.py OUT.json [--generations 5] [--pool 32]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

CATALOG = Path(os.environ.get("PARETUNE_CONTROLS_CATALOG") or REPO.parent / "shared" / "compileiq" / "search-spaces")
CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4}
SHAPE = {"batch": 4, "heads": 16, "seq": 2048, "head_dim": 128, "causal": 1}
SEED = 20261201


def objective(params: Any) -> Any:
    """CompileIQ's objective: ptxas 13.3 with the candidate ACF on the PTX, its spill bytes."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as work:
        acf = os.path.join(work, "candidate.acf")
        with open(acf, "wb") as out:
            out.write(bytes.fromhex(params))
        done = subprocess.run([os.environ["ANCHOR_PTXAS"], "-v", "--gpu-name=sm_90a", "--apply-controls", acf,
                               os.environ["ANCHOR_PTX"], "-o", os.path.join(work, "k.cubin")],
                              capture_output=True, text=True)
    if done.returncode != 0:
        return "*"
    frame = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", done.stdout + done.stderr)
    return sum(int(a) + int(b) for a, b in frame[-1:]) if frame else "*"


def lowered_ptx(directory: Path) -> Path:
    from wire.contract import KernelSpec
    from workers.backends.triton_backend import TritonBackend

    kernel = KernelSpec(backend="triton", builtin="attention_fwd", options={"compute_capability": "9.0"},
                        workload=[{"dims": SHAPE}])
    built = TritonBackend().compile(kernel, CONFIG, directory, compile_only=True)
    return directory / f"{next(iter(built.report['shapes']))}.ptx"


def compileiq_run(ptx: Path, ptxas: Path, processes: int, generations: int, pool: int) -> dict[str, Any]:
    from compileiq.backends import EngineConfig
    from compileiq.ciq import Search
    from compileiq.types import SearchConfiguration

    os.environ.update(ANCHOR_PTX=str(ptx), ANCHOR_PTXAS=str(ptxas))
    started = time.monotonic()
    search = Search(objective_function=objective, search_space=CATALOG / "ptxas13.3.bin",
                    search_config=SearchConfiguration(generations=generations, pool_size=pool),
                    engine=EngineConfig(name="amber", options={"seed": SEED}), exit_on_failure=False,
                    disable_progress_bar=True)
    search.start(num_workers=processes)
    seconds = time.monotonic() - started
    rows = search.result._checkpoint_rows()
    scores = [r["scores"][0] for r in rows if r["scores"] and r["scores"][0] != "*"]
    return {"runner": f"CompileIQ Search, {processes} process{'es' if processes > 1 else ''}",
            "seconds": seconds, "best": min(scores), "evaluations": len(rows),
            "invalid": sum(1 for r in rows if "*" in r["scores"])}


def paretune_run(ptx: Path, workers: int, generations: int, pool: int) -> dict[str, Any]:
    from helpers import cpu_seconds, start_service, wait_for

    work = Path(tempfile.mkdtemp(prefix="paretune-anchor-"))
    service = start_service(f"sqlite:///{work / 'paretune.db'}", work, {"PARETUNE_CONTROLS_CATALOG": str(CATALOG)})
    try:
        token = service.make_worker_token("cpu")
        cpus = sorted(os.sched_getaffinity(0))
        for index in range(workers):  # agents of one host: each its own CPUs (docs/operations.md)
            own = ",".join(str(c) for c in cpus[index::workers])
            service.start_worker(token, "--pool", "cpu", "--compile-cpus", own, "--measure-cpus", own,
                                 name=f"w{index}")
        with service.client() as client:
            wait_for(lambda: len(client.get("/v1/workers").json()) >= workers, 120, "the workers")
            cpu_before = cpu_seconds(service.process.pid)
            agents_before = sum(cpu_seconds(p.pid) for p in service.children)
            started = time.monotonic()
            r = client.post("/v1/studies", json={
                "name": "anchor", "pool": "cpu", "parallelism": pool,
                "kernel": {"backend": "ptx", "source": ptx.read_text(), "options": {"arch": "sm_90a"}},
                "space": [{"name": "acf", "type": "compiler_controls", "version": "13.3"}],
                "objectives": ["spill_bytes"],
                "sampler": {"name": "compileiq", "seed": SEED, "options": {"pool_size": pool,
                                                                          "generations": generations}},
                "budget": {"max_trials": 10 * generations * pool, "max_failed_trials": 10 * generations * pool},
                "limits": {"compile_timeout_s": 120},
            })
            assert r.status_code == 201, r.text
            study_id = r.json()["id"]
            until_finished(client, study_id, service.log_path)
            seconds = time.monotonic() - started
            cpu = cpu_seconds(service.process.pid) - cpu_before
            agents = sum(cpu_seconds(p.pid) for p in service.children) - agents_before
            study = client.get(f"/v1/studies/{study_id}").json()
            trials = client.get(f"/v1/studies/{study_id}/trials", params={"limit": 1000}).json()["items"]
            engine = [t for t in trials if not t["is_baseline"]]
            stored = sum(client.get(f"/v1/controls/files/{t['config']['acf']}").status_code == 200 for t in engine)
            timings = [client.get(f"/v1/studies/{study_id}/trials/{t['number']}").json()["timings"] for t in engine]
    finally:
        service.stop()
    scores = [t["values"]["spill_bytes"] for t in engine if t["state"] == "completed"]
    baseline = next(t for t in trials if t["is_baseline"])
    return {"runner": f"paretune, {workers} worker{'s' if workers > 1 else ''}", "seconds": study_seconds(study),
            "seconds_polled": seconds,
            "best": min(scores), "evaluations": len(engine), "invalid": len(engine) - len(scores),
            "baseline": baseline["values"]["spill_bytes"], "acfs_stored": stored, "finish": study["finish_reason"],
            "service_cpu_s_per_trial": cpu / max(1, len(trials)),
            "agent_cpu_s_per_trial": agents / max(1, len(trials)),
            "median_compile_s": statistics.median(t.get("compile_s", 0) for t in timings),
            "median_compile_wall_s": statistics.median(t.get("compile_wall_s", 0) for t in timings),
            **generation_gaps(trials, pool)}


def generation_gaps(trials: list[dict[str, Any]], pool: int) -> dict[str, Any]:
    """Where the workers waited: from the study's creation to the first lease, and at each
    generation's end, from its last result to the next generation's first lease (the engine's
    tell, its ask, the checkpoint and the new trials in between)."""
    from datetime import datetime

    def at(value: str) -> float:
        return datetime.fromisoformat(value).timestamp()

    engine = sorted((t for t in trials if not t["is_baseline"]), key=lambda t: t["number"])
    generations = [engine[i:i + pool] for i in range(0, len(engine), pool)]
    gaps = [min(at(t["started_at"]) for t in later) - max(at(t["finished_at"]) for t in earlier)
            for earlier, later in zip(generations, generations[1:], strict=False)]
    first = min(at(t["started_at"]) for t in trials) - min(at(t["created_at"]) for t in trials)
    held = [at(t["finished_at"]) - at(t["started_at"]) for t in trials]
    between = []
    for worker in {t["worker_id"] for t in trials}:
        own = sorted((t for t in trials if t["worker_id"] == worker), key=lambda t: at(t["started_at"]))
        between += [at(b["started_at"]) - at(a["finished_at"]) for a, b in zip(own, own[1:], strict=False)]
    return {"first_lease_s": first, "generation_gaps_s": gaps, "median_lease_to_result_s": statistics.median(held),
            "median_result_to_next_lease_s": statistics.median(between),
            "worker_idle_s": sum(max(0.0, x) for x in between)}


def until_finished(client: Any, study_id: int, log: Path) -> None:
    """Wait for the study's end, looking once a second: a tighter poll is service CPU that
    CompileIQ's runs do not pay (its wall time is the study's own, study_seconds)."""
    deadline = time.monotonic() + 1800
    while client.get(f"/v1/studies/{study_id}").json()["state"] == "running":
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(1.0)


def study_seconds(study: dict[str, Any]) -> float:
    """From the study's creation to its end, as the service recorded them."""
    from datetime import datetime

    return (datetime.fromisoformat(study["finished_at"]) - datetime.fromisoformat(study["created_at"])).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--generations", type=int, default=5)
    parser.add_argument("--pool", type=int, default=32)
    parser.add_argument("--runs", default="ciq1,ciq2,pt1,pt2", help="which of ciq1, ciq2, pt1, pt2 to run")
    args = parser.parse_args()
    from workers.compilers import toolchains

    toolchain = toolchains.selected()
    assert toolchain is not None and toolchain.release == "13.3", "needs the acf extra's ptxas 13.3"
    ptx = lowered_ptx(Path(tempfile.mkdtemp(prefix="anchor-ptx-")))
    runs = {"ciq1": lambda: compileiq_run(ptx, toolchain.ptxas, 1, args.generations, args.pool),
            "ciq2": lambda: compileiq_run(ptx, toolchain.ptxas, 2, args.generations, args.pool),
            "pt1": lambda: paretune_run(ptx, 1, args.generations, args.pool),
            "pt2": lambda: paretune_run(ptx, 2, args.generations, args.pool)}
    rows = []
    for name in args.runs.split(","):
        rows.append(runs[name]())
        print(json.dumps(rows[-1]), flush=True)
    by = {r["runner"]: r["seconds"] for r in rows}
    pairs = (("paretune, 2 workers", "CompileIQ Search, 2 processes"),
             ("paretune, 2 workers", "CompileIQ Search, 1 process"),
             ("paretune, 1 worker", "CompileIQ Search, 1 process"))
    ratios = {f"{a} / {b}": by[a] / by[b] for a, b in pairs if a in by and b in by}
    print(f"\n{'runner':32} {'wall s':>8} {'best spill B':>13} {'evaluations':>12} {'invalid':>8}")
    for r in rows:
        print(f"{r['runner']:32} {r['seconds']:8.1f} {r['best']:13.0f} {r['evaluations']:12d} {r['invalid']:8d}")
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}")
    args.out.write_text(json.dumps({"ptx_config": CONFIG, "shape": SHAPE, "seed": SEED, "generations": args.generations,
                                    "pool": args.pool, "ptxas": toolchain.version, "rows": rows, "ratios": ratios,
                                    "ptx_sha256": __import__("hashlib").sha256(ptx.read_bytes()).hexdigest()},
                                   indent=2))


if __name__ == "__main__":
    main()
