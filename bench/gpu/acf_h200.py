"""NVIDIA Advanced Controls Files on a GPU through the whole stack (docs/acf.md).

1. The fact: Triton builds a built-in with ptxas 13.3 (TRITON_PTXAS_PATH, the pinned
   toolchain), without and with one of the pack's ACFs; the cubins load and run under the
   card's driver and their results are checked against torch. Recorded either way.
2. The service on SQLite and one `paretune worker --gpu 0 --toolchain DIR`; the operator
   imports the Booster Pack (CompileIQ-generated ACFs, made on a CPU machine with
   bench/acf_pack.py); a study of the built-in over its Triton parameters and the pack's
   ACFs ("none" the baseline) for runtime_ms and energy_mj.
3. A/B: the study's fastest trial that applies an ACF, against no ACF at the same Triton
   configuration: a two-trial study (Triton parameters fixed there), whose ACF trial is
   promoted and validated against its baseline in interleaved rounds (the ratio's interval),
   approved by a second token, pulled and verified.
4. A plain PyTorch process, without the service, applies the artifact through the runtime
   module (its ACF only because TRITON_PTXAS_PATH is a 13.3 ptxas) and times it against the
   same configuration without the ACF, interleaved: is its ratio within the validation's
   interval?

    python3 bench/gpu/acf_h200.py OUT --kernel gemm --pack PACK.zip --toolchain DIR [--trials 20]

On the GPU machine (wheels from bench/gpu/fetch_wheels.sh in /tmp/site, ptxas 13.3 unpacked
into DIR/bin): see bench/results/gpu_acf.md for the command of each run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "bench" / "gpu")]

KERNELS: dict[str, dict[str, Any]] = {
    "gemm": {
        "builtin": "gemm_bf16", "module": "wire.kernels.gpu.gemm_bf16", "entry": "matmul_kernel",
        "dims": {"m": 4096, "n": 4096, "k": 4096}, "small": {"m": 512, "n": 512, "k": 512},
        "space": {"BLOCK_M": [64, 128], "BLOCK_N": [128, 256], "BLOCK_K": [32, 64], "num_warps": [4, 8],
                  "num_stages": [3, 4]},
        "baseline": {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3},
        "constants": {"GROUP_M": 8},
    },
    "attention": {
        "builtin": "attention_fwd", "module": "wire.kernels.gpu.attention_fwd", "entry": "attention_fwd",
        "dims": {"batch": 4, "heads": 16, "seq": 2048, "head_dim": 128, "causal": 1},
        "small": {"batch": 1, "heads": 2, "seq": 256, "head_dim": 128, "causal": 1},
        "space": {"BLOCK_M": [64, 128], "BLOCK_N": [32, 64], "num_warps": [4, 8], "num_stages": [1, 2],
                  "enable_fp_fusion": [True]},
        "baseline": {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "enable_fp_fusion": True},
        "constants": {},
    },
}
MEASURE = {"warmup_s": 0.1, "min_repeats": 20, "max_repeats": 2000, "target_s": 0.2}
TRITON_CONFIG = ("num_warps", "num_stages", "num_ctas", "maxnreg")


# -- a Triton built-in launched directly -----------------------------------------------------


def launcher(kernel: dict[str, Any], dims: dict[str, int], config: dict[str, Any], ptx_options: str | None) -> Any:
    """(launch, output, reference) of the built-in at `config`, its ACF through ptx_options."""
    module = importlib.import_module(kernel["module"])
    jit = getattr(module, kernel["entry"])
    inputs = module.make_inputs(dims, "cuda")
    args = module.arguments(inputs, dims)
    meta = {**kernel["constants"], **(module.constants(dims) if hasattr(module, "constants") else {}),
            **{k: v for k, v in config.items() if k.isupper()}}
    options = {k: v for k, v in config.items() if not k.isupper() and k != "acf"}
    if ptx_options:
        options["ptx_options"] = ptx_options
    grid = module.grid(dims, {**meta, **options})

    def launch() -> None:
        jit[grid](*args, **meta, **options)

    return launch, lambda: module.output(inputs), lambda: module.reference(inputs, dims)


def relative_error(output: Any, expected: Any) -> float:
    return float(((output.float() - expected.float()).norm() / expected.float().norm()).item())


def fact(kernel: dict[str, Any], acf: Path) -> dict[str, Any]:
    """Whether Triton's builds with ptxas 13.3, with and without an ACF, load and run correctly."""
    import torch

    found: dict[str, Any] = {"ptxas": os.environ.get("TRITON_PTXAS_PATH")}
    for name, options in (("no ACF", None), ("ACF", f"--apply-controls {acf}")):
        try:
            launch, output, reference = launcher(kernel, kernel["small"], kernel["baseline"], options)
            launch()
            torch.cuda.synchronize()
            error = relative_error(output(), reference())
            found[name] = {"ran": True, "rel_l2_err": error, "correct": error < 2e-2}
        except Exception as exc:  # the fact is recorded either way
            found[name] = {"ran": False, "error": f"{type(exc).__name__}: {exc}"[:3000]}
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True)
    found["gpu"] = smi.stdout.strip()
    return found


def apply_main(directory: Path, key: Path, spec_path: Path, out: Path) -> None:
    """The plain process: the artifact through the runtime module, against no ACF."""
    from artifacts_e2e import hot_ms, interleave

    from workers.runtime import ArtifactStore

    spec = json.loads(spec_path.read_text())
    kernel = KERNELS[spec["kernel"]]
    store = ArtifactStore.load(directory, str(key))
    controls = store.select(kernel["builtin"]).controls
    assert controls is not None
    launch_options = store.launch_options(kernel["builtin"])
    config = {**controls.meta_parameters, **controls.triton_options}
    config.pop("ptx_options", None)
    approved, output, reference = launcher(kernel, kernel["dims"], config, launch_options.get("ptx_options"))
    approved()
    error = relative_error(output(), reference())
    default, _, _ = launcher(kernel, kernel["dims"], config, None)
    result = {"rel_l2_err": error, "correct": error < 2e-2, "ptx_options": launch_options.get("ptx_options"),
              **interleave(approved, default, hot_ms, spec["rounds"]),
              "imports_service": any(n == "service" or n.startswith("service.") for n in sys.modules)}
    out.write_text(json.dumps(result, indent=2))


# -- the stack ---------------------------------------------------------------------------------


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        import run_studies as rs

        self.rs, self.args = rs, args
        self.kernel = KERNELS[args.kernel]
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        rs.OUT = self.out
        self.work = Path(tempfile.mkdtemp(prefix="paretune-acf-"))
        self.env = rs.service_env(self.work)
        self.summary: dict[str, Any] = {"kernel": args.kernel}

    def save(self) -> None:
        (self.out / f"acf_{self.args.kernel}.json").write_text(json.dumps(self.summary, indent=2, default=str))

    def start(self) -> tuple[Any, Any, Any, str]:
        rs = self.rs
        operator = rs.cli("token", "create", "--name", "operator", "--superuser", env=self.env)
        tuner = rs.cli("token", "create", "--name", "tuner", "--role", "admin", env=self.env)
        approver = rs.cli("token", "create", "--name", "reviewer", "--role", "approver", env=self.env)
        viewer = rs.cli("token", "create", "--name", "build", "--role", "viewer", env=self.env)
        worker = rs.cli("token", "create", "--name", "gpu0", "--worker", "--pool", "gpu0", env=self.env)
        rs.serve(self.work, self.env)
        measure, compile_ = rs.cpu_sets(0, 1)
        rs.spawn([sys.executable, "-m", "workers", "--server", rs.SERVER, "--pool", "gpu0", "--name", "gpu0",
                  "--cache-dir", str(self.work / "cache"), "--measure-cpus", measure, "--compile-cpus", compile_,
                  "--gpu", "0", "--warm", "--toolchain", str(self.args.toolchain)],
                 env={**self.env, "PARETUNE_WORKER_TOKEN": worker}, cwd=REPO,
                 stdout=open(self.work / "worker.log", "w"), stderr=subprocess.STDOUT)  # noqa: SIM115
        api = rs.Api(operator)
        self.wait("the worker's registration", lambda: api.get("/v1/workers"), 180)
        return api, rs.Api(tuner), rs.Api(approver), viewer

    def wait(self, what: str, check: Any, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(1.0)
        raise SystemExit(f"timed out waiting for {what}; logs in {self.work}")

    def study(self, api: Any, name: str, space: list[dict[str, Any]], baseline: dict[str, Any],
              sampler: dict[str, Any], trials: int) -> tuple[int, list[dict[str, Any]]]:
        rs = self.rs
        study = api.post("/v1/studies", {
            "name": name, "kernel": {"backend": "triton", "builtin": self.kernel["builtin"],
                                     "workload": [{"dims": self.kernel["dims"]}]},
            "space": space, "baseline": baseline, "objectives": ["runtime_ms", "energy_mj"],
            "budget": {"max_trials": trials}, "parallelism": 2, "pool": "gpu0", "sampler": sampler,
            "measure": MEASURE, "limits": {"compile_timeout_s": 300, "run_timeout_s": 120, "max_attempts": 2},
        })
        self.wait(name, lambda: rs.finished(api.get(f"/v1/studies/{study['id']}")), self.args.study_timeout_s)
        trials_ = rs.all_trials(api, study["id"])
        rs.log(f"{name}: study {study['id']}: " + ", ".join(
            f"{t['number']}:{t['state']}:{t['config'].get('acf', '')[:8]}:"
            f"{(t.get('values') or {}).get('runtime_ms', t.get('failure_reason'))}" for t in trials_))
        return study["id"], rs.collect(api, study["id"])["trials"]

    def run(self) -> None:
        rs, args, kernel = self.rs, self.args, self.kernel
        operator, tuner, reviewer, viewer = self.start()
        pack = args.pack.read_bytes()
        imported = operator.client.post("/v1/controls/packs", content=pack,
                                        headers={"Content-Type": "application/zip"})
        if imported.status_code not in (200, 201):
            raise SystemExit(f"the pack was refused: {imported.text}")
        pack_id = imported.json()["pack_id"]
        self.summary["pack"] = {"pack_id": pack_id, "files": imported.json()["files"]}
        rs.log(f"pack {pack_id} imported: {len(imported.json()['files'])} ACFs")

        space = [{"name": k, "type": "categorical", "choices": v} for k, v in kernel["space"].items()]
        space.append({"name": "acf", "type": "compiler_controls", "version": "13.3", "pack": pack_id})
        _, trials = self.study(tuner, f"{kernel['builtin']}: Triton parameters and ACF", space,
                            {**kernel["baseline"], "acf": "none"},
                            {"name": "nsga2", "seed": 20261201, "options": {"population_size": 8}}, args.trials)
        self.summary["search"] = trials
        self.save()
        done = [t for t in trials if t["state"] == "completed"]
        with_acf = [t for t in done if t["config"]["acf"] != "none"]
        best = min(with_acf, key=lambda t: t["values"]["runtime_ms"])
        rs.log(f"fastest trial with an ACF: {best['number']} {best['config']} {best['values']}")

        fixed = {k: v for k, v in best["config"].items() if k != "acf"}
        ab_space = [{"name": k, "type": "categorical", "choices": [v]} for k, v in fixed.items()]
        ab_space.append({"name": "acf", "type": "compiler_controls", "version": "13.3",
                         "choices": ["none", best["config"]["acf"]]})
        ab_id, ab = self.study(tuner, f"{kernel['builtin']}: ACF {best['config']['acf'][:12]} against none", ab_space,
                        {**fixed, "acf": "none"}, {"name": "grid", "seed": 1}, 3)
        self.summary["ab_trials"] = ab
        number = next(t["number"] for t in ab if t["config"]["acf"] == best["config"]["acf"])
        promoted = tuner.post(f"/v1/studies/{ab_id}/candidates",
                              {"trials": [number], "rounds": args.rounds, "note": "the ACF against none"})
        candidate_id = promoted["candidates"][0]["id"]
        detail = self.wait("the validation", lambda: (lambda d: d if d["state"] != "validating" else None)(
            tuner.get(f"/v1/candidates/{candidate_id}")), args.validation_timeout_s)
        self.summary["validation"] = detail
        self.save()
        rs.log(f"validation: {detail['state']}: {json.dumps(detail.get('result'))[:1500]}")
        if detail["state"] != "validated":
            raise SystemExit("the ACF candidate was not validated")
        version = reviewer.post(f"/v1/candidates/{candidate_id}/approve", {"why": "A/B against no ACF"})
        self.summary["artifact"] = {k: version[k] for k in ("artifact_id", "version", "sha256")}
        self.summary["artifact_acf"] = {k: v for k, v in version["document"]["controls"]["acf"].items()
                                        if k != "content_base64"}
        key = self.out / "paretune-public.pem"
        key.write_text(tuner.get("/v1/artifacts/public-key")["pem"])
        directory = self.work / "artifacts"
        directory.mkdir()
        target = version["document"]["target"]
        (directory / f"{kernel['builtin']}.json").write_text(version["file"])
        verify = subprocess.run([sys.executable, "-m", "service.cli", "artifact", "verify",
                                 str(directory / f"{kernel['builtin']}.json"), "--public-key", str(key)],
                                capture_output=True, text=True, cwd=REPO)
        self.summary["verify"] = verify.stdout.strip() + verify.stderr.strip()
        spec = self.work / "apply.json"
        spec.write_text(json.dumps({"kernel": args.kernel, "rounds": args.apply_rounds}))
        applied = self.work / "applied.json"
        plain = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--apply", str(directory),
                                "--key", str(key), "--spec", str(spec), "--applied", str(applied)],
                               capture_output=True, text=True, cwd=REPO,
                               env={k: v for k, v in os.environ.items() if not k.startswith("PARETUNE_")})
        if plain.returncode != 0:
            self.summary["plain_error"] = plain.stdout[-3000:] + plain.stderr[-3000:]
            self.save()
            raise SystemExit(f"the plain process failed: {plain.stderr[-3000:]}")
        outside = json.loads(applied.read_text())
        metric = next(m for m in detail["result"]["metrics"] if m["objective"] == "runtime_ms")
        self.summary.update(target=target, outside=outside, validated_runtime=metric,
                            within_interval=metric["ci_low"] <= outside["ratio"] <= metric["ci_high"])
        rs.log(f"validated ACF/none runtime {metric['ratio']:.4f} [{metric['ci_low']:.4f}, {metric['ci_high']:.4f}]"
               f"; plain process {outside['ratio']:.4f}; within: {self.summary['within_interval']}")
        self.save()
        (self.out / f"logs_{args.kernel}.txt").write_text(rs.log_tails(self.work, 20000))


def first_acf(pack: Path) -> Path:
    with zipfile.ZipFile(pack) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".acf"))
        path = Path(tempfile.mkdtemp()) / Path(name).name
        path.write_bytes(archive.read(name))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--kernel", choices=list(KERNELS), default="gemm")
    parser.add_argument("--pack", type=Path)
    parser.add_argument("--toolchain", type=Path, help="a directory holding bin/ptxas 13.3")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--apply-rounds", type=int, default=8)
    parser.add_argument("--study-timeout-s", type=float, default=300)
    parser.add_argument("--validation-timeout-s", type=float, default=240)
    parser.add_argument("--fact-only", action="store_true")
    parser.add_argument("--apply", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--key", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--spec", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--applied", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.apply is not None:  # TRITON_PTXAS_PATH: the parent's, a 13.3 ptxas
        apply_main(args.apply, args.key, args.spec, args.applied)
        return
    os.environ["TRITON_PTXAS_PATH"] = str(args.toolchain / "bin" / "ptxas")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    found = fact(KERNELS[args.kernel], first_acf(args.pack))
    print(json.dumps(found), flush=True)
    (out / f"fact_{args.kernel}.json").write_text(json.dumps(found, indent=2))
    if args.fact_only:
        return
    run = Run(args)
    run.summary["fact"] = found
    try:
        run.run()
    finally:
        run.save()


if __name__ == "__main__":
    main()
