"""Liger-Kernel's RMSNorm and SwiGLU forward tuned per token under a serving trace, through the
whole stack, against Liger's own settings; the approved configurations exported and run.

1. The trace (Azure's 2023 code trace by default) goes through `paretune workload import`
   (the continuous-batching simulation) into M buckets and weights: a forward step's tokens
   are the rows of both kernels (Llama-3-8B: RMSNorm over 4096 columns, SwiGLU over 14336).
2. The service (SQLite) and one `paretune worker` on GPU 0 run a study of each kernel,
   given by `module:` (liger_harness/rms_norm.yaml and swiglu.yaml; the harness text is sent
   in options.harness_source so the artifact's hash covers it): the whole grid of what Liger
   passes at launch (BLOCK_SIZE, num_warps), objectives time_per_token_us and
   energy_per_token_mj, the baseline Liger's calculate_settings.
3. Each study's fastest configuration per token that is not the baseline's is promoted,
   validated against the baseline in interleaved rounds (correctness on the extended shapes),
   approved with a second token, verified, exported as a `triton.Config` module
   (`paretune artifact export triton`) and that file checked (`paretune artifact verify`).
4. A plain process (no service) launches Liger's own JIT function three ways on every shape:
   through `@paretune_autotune` resolving the signed artifact, through `triton.autotune`
   over the exported CONFIGS, and with Liger's calculate_settings; it checks that the first
   two launch the approved configuration and give the reference's result, and times all three
   as the worker does (hot time per call, CUDA graphs), in interleaved rounds, into time per
   token under the trace's weights: the approved/heuristic ratio against the validation's
   interval.

Written to OUT: liger.json (everything), liger.md (the tables), mix.json, the artifacts, the
exported modules and their records, the public key, logs.txt.

    python3 bench/gpu/liger.py OUT --trace AzureLLMInferenceTrace_code.csv [--rounds 4]
    python bench/gpu/liger.py OUT --trace trace.csv --local   # cpu stand-ins (tests/minikern), to test the script

On the GPU machine (Python 3.12; the service's packages and liger-kernel travel as wheels,
bench/gpu/fetch_wheels.sh):

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site timeout 480 python3 bench/gpu/liger.py $OUT --trace .gpu-24/AzureLLMInferenceTrace_code.csv

(`--apply SPEC` is the plain process's own mode.)
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

# the study's buckets: few enough shapes that a trial measures in seconds, the largest prefill
# steps (8192 tokens, max_num_batched_tokens) apart from the rest
BUCKETS = "1,8,64,512,2048,8192"
HIDDEN, INTERMEDIATE = 4096, 14336  # Llama-3-8B (service/workloads/presets.json), tensor-parallel 1
KERNELS = {
    "rmsnorm": {"document": "rms_norm.yaml", "harness": "liger_harness.rms_norm", "cols": HIDDEN,
                "local_module": "minikern.ops.rms_norm:_rms_norm_forward_kernel", "problem": "rmsnorm"},
    "swiglu": {"document": "swiglu.yaml", "harness": "liger_harness.swiglu", "cols": INTERMEDIATE,
               "local_module": "minikern.ops.swiglu:_swiglu_forward_kernel", "problem": "swiglu"},
}
LOCAL_COLS = {"rmsnorm": 1000, "swiglu": 700}
LOCAL_MEASURE = {"warmup_s": 0.005, "min_repeats": 5, "max_repeats": 100, "target_s": 0.02, "hot_window_s": 0.05}
OBJECTIVES = ("time_per_token_us", "energy_per_token_mj")


# -- the documents ------------------------------------------------------------------------------


def study_document(role: str, mix: dict[str, Any], local: bool) -> dict[str, Any]:
    """The shipped document of `role` with the traffic's workload, its harness's text, the pool;
    on --local the minikern stand-in of the same kernel on the cpu backend."""
    spec = KERNELS[role]
    document = yaml.safe_load((HERE / "liger_harness" / spec["document"]).read_text())
    kernel = document["kernel"]
    cols = LOCAL_COLS[role] if local else spec["cols"]
    kernel["workload"] = [{"dims": {"rows": w["dims"]["rows"], "cols": cols}, "weight": w["weight"]}
                          for w in mix["workload"]]
    options = kernel["options"]
    if local:
        from minikern.ops.utils import calculate_settings

        block, warps = calculate_settings(cols)
        kernel.update(backend="cpu", module=spec["local_module"])
        options.pop("harness")
        options["problem"] = spec["problem"]
        blocks = sorted({block, 2 * block})
        document["space"] = [{"name": "BLOCK_SIZE", "type": "categorical", "choices": blocks},
                             {"name": "NUM_WARPS", "type": "categorical", "choices": [2, 4, 8]}]
        document["baseline"] = {"BLOCK_SIZE": block, "NUM_WARPS": warps}
        document["budget"] = {"max_trials": len(blocks) * 3}
        document["measure"] = LOCAL_MEASURE
        document["objectives"] = ["time_per_token_us"]  # no energy counter on a cpu worker here
    else:
        module = importlib.util.find_spec(options.pop("harness"))
        assert module is not None and module.origin
        options["harness_source"] = Path(module.origin).read_text()
    document["pool"] = "gpu0"
    document["parallelism"] = 2
    return document


# -- the plain process: Liger's own kernel, the export and the runtime decorator, no service -----


def apply_gpu(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    import triton
    from artifacts_e2e import hot_ms
    from liger_kernel.ops.utils import calculate_settings

    from workers.backends.modules import import_kernel
    from workers.runtime.autotune import paretune_autotune

    results = {}
    for role, item in spec["kernels"].items():
        harness = importlib.import_module(KERNELS[role]["harness"])
        jit = import_kernel(item["module"])
        exported = _load_file(Path(item["export"]))
        decorated = paretune_autotune(kernel=item["module"], key=["n_cols"], dims={"n_cols": "cols"},
                                      artifacts=[item["artifact"]], public_keys=spec["key"])(jit)
        autotuned = triton.autotune(configs=exported.CONFIGS, key=["n_cols"])(jit)
        cols = item["workload"][0]["dims"]["cols"]
        block, warps = calculate_settings(cols)
        heuristic = {"BLOCK_SIZE": block, "num_warps": warps}
        chosen = decorated.config_for(n_cols=cols)
        configs = [{**c.kwargs, "num_warps": c.num_warps} for c in exported.CONFIGS]
        launches: dict[str, list[Any]] = {"decorator": [], "exported": [], "heuristic": []}
        errors, identical = [], []
        generator = torch.Generator(device="cuda").manual_seed(0)
        for shape in item["workload"]:
            dims = shape["dims"]
            inputs = {name: harness.make_inputs(dims, "cuda", generator) for name in launches}
            for name in ("exported", "heuristic"):  # the same input values for all three
                for key, tensor in inputs[name].items():
                    tensor.copy_(inputs["decorator"][key])
            constants = harness.constants(dims)
            grid = harness.grid(dims, {})

            def launcher(name: str, inputs: dict[str, Any] = inputs, dims: dict[str, int] = dims,
                         constants: dict[str, Any] = constants, grid: tuple[int, ...] = grid,
                         harness: Any = harness, kernels: dict[str, Any] = {  # noqa: B006
                             "decorator": decorated, "exported": autotuned}, jit: Any = jit,
                         heuristic: dict[str, Any] = heuristic) -> Any:
                args = harness.arguments(inputs[name], dims)
                if name in kernels:
                    return lambda: kernels[name][grid](*args, **constants)
                return lambda: jit[grid](*args, **constants, **heuristic)

            for name in launches:
                launches[name].append(launcher(name))
                launches[name][-1]()
            torch.cuda.synchronize()
            reference = harness.reference(inputs["decorator"], dims)
            out = harness.output(inputs["decorator"]).double()
            errors.append(float((out - reference).norm() / reference.norm()))
            identical.append(bool(torch.equal(harness.output(inputs["decorator"]), harness.output(inputs["exported"]))))
        weights = [s["weight"] for s in item["workload"]]
        tokens = sum(w * s["dims"]["rows"] for w, s in zip(weights, item["workload"], strict=True))
        rounds: dict[str, list[float]] = {name: [] for name in launches}
        shape_ms: dict[str, list[list[float]]] = {name: [] for name in launches}
        for index in range(spec["rounds"]):
            order = list(launches) if index % 2 == 0 else list(reversed(launches))
            per_shape = {name: [hot_ms(fn, window_s=spec["window_s"]) for fn in launches[name]] for name in order}
            for name in launches:
                shape_ms[name].append(per_shape[name])
                total = sum(w * t for w, t in zip(weights, per_shape[name], strict=True))
                rounds[name].append(1000.0 * total / tokens)  # time per token, us
        ratios = [a / h for a, h in zip(rounds["decorator"], rounds["heuristic"], strict=True)]
        results[role] = {
            "approved": item["approved"], "decorator_config": chosen, "exported_configs": configs,
            "heuristic": heuristic, "decorator_picks_approved": _same(chosen, item["approved"]),
            "export_is_approved": len(configs) == 1 and _same(configs[0], item["approved"]),
            "rel_l2_err": errors, "correct": max(errors) < 2e-2, "decorator_equals_export": all(identical),
            "time_per_token_us": {name: statistics.median(values) for name, values in rounds.items()},
            "rounds": rounds, "shape_ms": shape_ms, "ratio": statistics.geometric_mean(ratios),
            "liger_version": _version("liger-kernel"), "triton": triton.__version__, "torch": torch.__version__,
        }
    return results


def apply_local(spec: dict[str, Any]) -> dict[str, Any]:
    """The cpu stand-ins: the decorator and the exported CONFIGS name the approved configuration
    (a cpu kernel is C: there is no Triton launch to time)."""
    from workers.runtime.autotune import paretune_autotune

    results = {}
    for role, item in spec["kernels"].items():
        exported = _load_file(Path(item["export"]))
        decorated = paretune_autotune(kernel=item["module"], key=["cols"], artifacts=[item["artifact"]],
                                      public_keys=spec["key"])(lambda *args, **kwargs: None)
        chosen = decorated.config_for(cols=item["workload"][0]["dims"]["cols"])
        configs = [{**c.kwargs, "num_warps": c.num_warps} for c in exported.CONFIGS]
        results[role] = {"approved": item["approved"], "decorator_config": chosen, "exported_configs": configs,
                         "decorator_picks_approved": _same(chosen, item["approved"]),
                         "export_is_approved": len(configs) == 1 and _same(configs[0], item["approved"], local=True)}
    return results


def _same(launch: dict[str, Any] | None, approved: dict[str, Any], local: bool = False) -> bool:
    """A launch's arguments give the approved configuration (a cpu artifact's NUM_WARPS is a
    macro, which triton.Config carries as a meta-parameter beside its default num_warps)."""
    if launch is None:
        return False
    return all(launch.get(k) == v for k, v in approved.items() if not (local and k == "num_warps"))


def _load_file(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _version(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def apply_main(spec_path: Path, out: Path) -> None:
    spec = json.loads(spec_path.read_text())
    result = apply_local(spec) if spec["local"] else apply_gpu(spec)
    imported = any(name == "service" or name.startswith("service.") for name in sys.modules)
    out.write_text(json.dumps({"kernels": result, "imports_service": imported}, indent=2, default=str))


# -- the stack ----------------------------------------------------------------------------------


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        import run_studies as rs

        self.rs, self.args, self.local = rs, args, args.local
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        rs.OUT = self.out
        self.work = Path(tempfile.mkdtemp(prefix="paretune-liger-"))
        paths = [str(HERE), str(REPO)]
        if self.local:
            sys.path.insert(0, str(REPO / "tests"))
            from stand_ins import install_minikern

            site = Path(tempfile.mkdtemp(prefix="paretune-minikern-"))
            site.chmod(0o755)  # the sandbox's user imports it
            install_minikern(site)
            sys.path.insert(0, str(site))
            paths.insert(0, str(site))
        python_path = os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        self.env = rs.service_env(self.work, PYTHONPATH=python_path)

    def preflight(self) -> dict[str, Any]:
        """What the GPU run needs, checked before anything starts: Liger importable, its settings
        rule the documents' baselines."""
        if self.local:
            return {}
        from liger_harness import liger_settings
        from liger_kernel.ops.utils import calculate_settings

        found = {role: list(calculate_settings(spec["cols"])) for role, spec in KERNELS.items()}
        for role, spec in KERNELS.items():
            document = yaml.safe_load((HERE / "liger_harness" / spec["document"]).read_text())
            baseline = [document["baseline"]["BLOCK_SIZE"], document["baseline"]["num_warps"]]
            if found[role] != baseline or list(liger_settings(spec["cols"])) != baseline:
                raise SystemExit(f"{role}: Liger's calculate_settings({spec['cols']}) = {found[role]}, "
                                 f"the document's baseline {baseline}")
        self.rs.log(f"liger-kernel {_version('liger-kernel')}: calculate_settings {found}")
        return {"calculate_settings": found, "liger_version": _version("liger-kernel")}

    def import_trace(self) -> dict[str, Any]:
        done = self.cli("workload", "import", str(self.args.trace), "--format", self.args.format,
                        "--buckets", self.args.buckets, "--dim", "rows")
        (self.out / "mix.txt").write_text(done.stdout)
        mix = json.loads(self.cli("workload", "import", str(self.args.trace), "--format", self.args.format,
                                  "--buckets", self.args.buckets, "--dim", "rows", "--json").stdout)
        (self.out / "mix.json").write_text(json.dumps(mix, indent=2))
        self.rs.log(f"trace {mix['trace']['file']}: {mix['trace']['requests']} requests, {mix['steps']} steps, "
                    f"{mix['tokens_per_step']:.1f} tokens per step; workload {mix['workload']}")
        return mix

    def start(self) -> tuple[Any, Any]:
        rs = self.rs
        admin = rs.cli("token", "create", "--name", "tuner", "--role", "admin", env=self.env)
        approver = rs.cli("token", "create", "--name", "reviewer", "--role", "approver", env=self.env)
        worker = rs.cli("token", "create", "--name", "gpu0", "--worker", "--pool", "gpu0", env=self.env)
        rs.serve(self.work, self.env)
        measure, compile_ = rs.cpu_sets(0, 1)
        command = [sys.executable, "-m", "workers", "--server", rs.SERVER, "--pool", "gpu0", "--name", "gpu0",
                   "--cache-dir", str(self.work / "cache"), "--measure-cpus", measure, "--compile-cpus", compile_]
        command += ["--backends", "cpu"] if self.local else ["--gpu", "0", "--warm"]
        if self.args.bwrap:  # the namespaces level where bwrap works here, else the next best
            command += ["--bwrap", self.args.bwrap]
        rs.spawn(command, env={**self.env, "PARETUNE_WORKER_TOKEN": worker}, cwd=REPO,
                 stdout=open(self.work / "worker.log", "w"), stderr=subprocess.STDOUT)  # noqa: SIM115
        return rs.Api(admin), rs.Api(approver)

    def wait(self, what: str, check: Any, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(1.0)
        raise SystemExit(f"timed out waiting for {what}")

    def run(self) -> dict[str, Any]:
        rs, args = self.rs, self.args
        summary: dict[str, Any] = {"preflight": self.preflight(), "buckets": args.buckets}
        mix = self.import_trace()
        summary["mix"] = {k: mix[k] for k in ("trace", "serving", "steps", "duration_s", "tokens_per_step",
                                              "workload")}
        tuner, reviewer = self.start()
        roles = [r.strip() for r in args.kernels.split(",")]
        documents = {role: study_document(role, mix, self.local) for role in roles}
        studies = {role: tuner.post("/v1/studies", document) for role, document in documents.items()}
        rs.log("studies " + ", ".join(f"{role} {study['id']}" for role, study in studies.items()))
        for role, study in studies.items():
            self.wait(f"the {role} study", lambda s=study: rs.finished(tuner.get(f"/v1/studies/{s['id']}")),
                      args.study_timeout_s)
            rs.log(f"{role}: study {study['id']} finished")
        key = self.out / "paretune-public.pem"
        key.write_text(tuner.get("/v1/artifacts/public-key")["pem"])
        kernels: dict[str, Any] = {}
        apply: dict[str, Any] = {}
        candidates = {role: self.promote(tuner, study["id"], documents[role]) for role, study in studies.items()}
        for role, study in studies.items():
            kernels[role] = self.approve(tuner, reviewer, role, study["id"], candidates[role], documents[role], key)
            apply[role] = {"module": documents[role]["kernel"]["module"], "workload": documents[role]["kernel"][
                "workload"], "artifact": kernels[role]["artifact_file"], "export": kernels[role]["export_file"],
                "approved": kernels[role]["approved_config"]}
        spec = self.work / "apply.json"
        spec.write_text(json.dumps({"kernels": apply, "key": str(key), "rounds": args.apply_rounds,
                                    "window_s": args.apply_window_s, "local": self.local}))
        applied = self.out / "applied.json"
        plain = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--apply", str(spec), "--applied",
                                str(applied)], capture_output=True, text=True, cwd=REPO,
                               env={k: v for k, v in self.env.items() if not k.startswith("PARETUNE_")})
        if plain.returncode != 0:
            raise SystemExit(f"the plain process failed:\n{plain.stdout}\n{plain.stderr}")
        outside = json.loads(applied.read_text())
        summary["imports_service"] = outside["imports_service"]
        for role, result in outside["kernels"].items():
            kernels[role]["outside"] = result
            self.judge(role, kernels[role])
        summary["kernels"] = kernels
        (self.out / "liger.json").write_text(json.dumps(summary, indent=2, default=str))
        (self.out / "logs.txt").write_text(rs.log_tails(self.work, 30000))
        (self.out / "liger.md").write_text(report(summary))
        print(report(summary))
        return summary

    def promote(self, tuner: Any, study_id: int, document: dict[str, Any]) -> dict[str, Any]:
        """The fastest configuration per token that is not the baseline's, sent to validation."""
        rs = self.rs
        trials = rs.all_trials(tuner, study_id)
        completed = [t for t in trials if t["state"] == "completed" and not t["is_baseline"]
                     and t["config"] != document["baseline"]]
        if not completed:
            raise SystemExit(f"study {study_id}: no completed trial besides the baseline: "
                             f"{[(t['config'], t['state'], t.get('failure_reason')) for t in trials]}")
        best = min(completed, key=lambda t: t["values"]["time_per_token_us"])
        promoted = tuner.post(f"/v1/studies/{study_id}/candidates",
                              {"trials": [best["number"]], "rounds": self.args.rounds, "note": "fastest per token"})
        rs.log(f"study {study_id}: promoted trial {best['number']} {best['config']} {best['values']}")
        return {"best": best, "candidate_id": promoted["candidates"][0]["id"]}

    def approve(self, tuner: Any, reviewer: Any, role: str, study_id: int, candidate: dict[str, Any],
                document: dict[str, Any], key: Path) -> dict[str, Any]:
        rs = self.rs
        candidate_id = candidate["candidate_id"]

        def settled() -> dict[str, Any] | None:
            detail = tuner.get(f"/v1/candidates/{candidate_id}")
            return detail if detail["state"] != "validating" else None

        detail = self.wait(f"the {role} validation", settled, self.args.validation_timeout_s)
        rs.log(f"{role}: validation {detail['state']}: {detail['result']['message'] if detail['result'] else ''}")
        if detail["state"] != "validated":
            raise SystemExit(f"{role}: the candidate was not validated: {json.dumps(detail)[:3000]}")
        version = reviewer.post(f"/v1/candidates/{candidate_id}/approve", {"why": "validated per token"})
        artifact = self.out / f"{role}.artifact.json"
        artifact.write_text(version["file"])
        verify = self.cli("artifact", "verify", str(artifact), "--public-key", str(key))
        export = self.out / f"{role}_configs.py"
        exported = self.cli("artifact", "export", "triton", str(artifact), "-o", str(export), "--public-key", str(key))
        checked = self.cli("artifact", "verify", str(export), str(artifact), "--public-key", str(key))
        rs.log(f"{role}: artifact v{version['version']} {version['sha256'][:16]}: {verify.stdout.strip()} | "
               f"{exported.stdout.strip()} | {checked.stdout.strip()}")
        study = rs.collect(tuner, study_id)
        validation = tuner.get(f"/v1/validations/{detail['validation_id']}")
        metrics = {m["objective"]: m for m in detail["result"]["metrics"]}
        return {
            "study_id": study_id, "module": document["kernel"]["module"], "space": document["space"],
            "baseline_config": document["baseline"], "workload": document["kernel"]["workload"],
            "measure": document["measure"], "study_state": study["study"]["state"],
            "trials": [{k: t.get(k) for k in ("number", "config", "state", "values", "is_baseline",
                                                 "failure_reason", "message")} for t in study["trials"]],
            "front": study["front"], "best": candidate["best"], "approved_config": version["document"]["controls"][
                "config"], "validation": metrics, "validation_rounds": validation.get("rounds"),
            "artifact": {k: version[k] for k in ("artifact_id", "version", "sha256")},
            "target": version["document"]["target"], "artifact_file": str(artifact), "export_file": str(export),
            "export_source": export.read_text(), "verify": verify.stdout.strip().splitlines()[0],
            "export_check": checked.stdout.strip(),
        }

    def judge(self, role: str, kernel: dict[str, Any]) -> None:
        """The plain process's time per token, approved against heuristic, beside the validation's."""
        outside, metric = kernel["outside"], kernel["validation"].get("time_per_token_us")
        if self.local or metric is None:
            self.rs.log(f"{role}: decorator picks the approved configuration: {outside['decorator_picks_approved']}; "
                        f"the export is it: {outside['export_is_approved']}")
            return
        from service.artifacts.comparison import PairedBlock, compare

        rounds = outside["rounds"]
        mine = compare([PairedBlock(rounds["heuristic"], rounds["decorator"])], objective="time_per_token_us",
                       direction="minimize", unit="us")
        outside["interval"] = mine.model_dump()
        outside["within_validation_interval"] = metric["ci_low"] <= outside["ratio"] <= metric["ci_high"]
        outside["intervals_overlap"] = (mine.ci_low is not None and mine.ci_high is not None
                                        and mine.ci_low <= metric["ci_high"] and metric["ci_low"] <= mine.ci_high)
        self.rs.log(f"{role}: validated {metric['ratio']:.4f} [{metric['ci_low']:.4f}, {metric['ci_high']:.4f}]; "
                    f"plain process {outside['ratio']:.4f} [{mine.ci_low or 0:.4f}, {mine.ci_high or 0:.4f}]; "
                    f"decorator picks approved {outside['decorator_picks_approved']}, export is approved "
                    f"{outside['export_is_approved']}, correct {outside['correct']}")

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "service.cli", *args], capture_output=True, text=True,
                              env=self.env, cwd=REPO)
        if done.returncode != 0:
            raise SystemExit(f"paretune {' '.join(args[:3])} failed: {done.stdout}{done.stderr}")
        return done


# -- the report ---------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 4) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else "-"


def _config(config: dict[str, Any] | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in (config or {}).items()) or "-"


def report(summary: dict[str, Any]) -> str:
    mix = summary["mix"]
    lines = [f"trace {mix['trace']['file']} ({mix['trace']['format']}, sha256 {mix['trace']['sha256'][:16]}): "
             f"{mix['trace']['requests']} requests, {mix['steps']} forward steps, {mix['tokens_per_step']:.1f} tokens "
             f"per step; buckets {summary['buckets']}", "",
             "| rows (tokens) | weight |", "| --- | --- |",
             *(f"| {w['dims']['rows']} | {w['weight']:.4f} |" for w in mix["workload"]), ""]
    for role, kernel in summary["kernels"].items():
        trials = sorted((t for t in kernel["trials"] if t["state"] == "completed"),
                        key=lambda t: t["values"]["time_per_token_us"])
        base = next((t for t in kernel["trials"] if t["is_baseline"] and t["state"] == "completed"), None)
        front = {tuple(sorted(t["config"].items())) for t in kernel["front"].get("trials", [])} if isinstance(
            kernel["front"], dict) else set()
        lines += [f"## {role}: {kernel['module']}", "",
                  "| configuration | time per token (us) | energy per token (mJ) | time / baseline | energy / baseline "
                  "| front |", "| --- | --- | --- | --- | --- | --- |"]
        for t in trials:
            values = t["values"]
            ratio = [values[o] / base["values"][o] if base and o in values else None for o in OBJECTIVES]
            mark = ("baseline " if t["is_baseline"] else "") + ("yes" if tuple(sorted(t["config"].items())) in front
                                                                else "")
            lines.append(f"| {_config(t['config'])} | {_fmt(values.get('time_per_token_us'))} | "
                         f"{_fmt(values.get('energy_per_token_mj'), 6)} | {_fmt(ratio[0])} | {_fmt(ratio[1])} "
                         f"| {mark} |")
        failed = [t for t in kernel["trials"] if t["state"] != "completed"]
        if failed:
            lines += ["", "not completed: " + "; ".join(f"{_config(t['config'])}: {t['state']} {t['failure_reason']}"
                                                        for t in failed)]
        lines += ["", "| approved against Liger's heuristic | value |", "| --- | --- |",
                  f"| approved configuration | {_config(kernel['approved_config'])} |",
                  f"| heuristic (baseline) | {_config(kernel['baseline_config'])} |"]
        for objective, metric in kernel["validation"].items():
            lines.append(f"| validation ({kernel['validation_rounds']} rounds): {objective} approved/baseline | "
                         f"{_fmt(metric.get('ratio'))} [{_fmt(metric.get('ci_low'))}, {_fmt(metric.get('ci_high'))}]"
                         f"{' significant' if metric.get('significant') else ''} |")
        outside = kernel.get("outside", {})
        lines += [f"| artifact | v{kernel['artifact']['version']} sha256 {kernel['artifact']['sha256'][:16]}, "
                  f"{kernel['verify']} |",
                  f"| exported triton.Config | {_config(outside.get('exported_configs', [{}])[0])}; "
                  f"{kernel['export_check']} |",
                  f"| @paretune_autotune launches | {_config(outside.get('decorator_config'))} (approved: "
                  f"{outside.get('decorator_picks_approved')}) |"]
        if "ratio" in outside:
            interval = outside.get("interval", {})
            times = outside["time_per_token_us"]
            lines += [f"| plain process: time per token, decorator / export / heuristic (us) | "
                      f"{_fmt(times['decorator'])} / {_fmt(times['exported'])} / {_fmt(times['heuristic'])} |",
                      f"| plain process: approved/heuristic | {_fmt(outside['ratio'])} "
                      f"[{_fmt(interval.get('ci_low'))}, {_fmt(interval.get('ci_high'))}] |",
                      f"| within the validation's interval / intervals overlap | "
                      f"{outside.get('within_validation_interval')} / {outside.get('intervals_overlap')} |",
                      f"| result against the reference (rel. L2, worst shape); decorator = export bit for bit | "
                      f"{max(outside['rel_l2_err']):.2e}; {outside['decorator_equals_export']} |"]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--trace", type=Path, help="the serving trace")
    parser.add_argument("--format", default="azure", help="the trace's format (azure, mooncake, burstgpt)")
    parser.add_argument("--buckets", default=BUCKETS)
    parser.add_argument("--kernels", default="rmsnorm,swiglu")
    parser.add_argument("--rounds", type=int, default=4, help="validation rounds")
    parser.add_argument("--apply-rounds", type=int, default=3, help="rounds in the plain process")
    parser.add_argument("--apply-window-s", type=float, default=0.1, help="hot window per shape in the plain process")
    parser.add_argument("--study-timeout-s", type=float, default=400)
    parser.add_argument("--validation-timeout-s", type=float, default=300)
    parser.add_argument("--bwrap", help="the bubblewrap binary for the worker (bench/gpu/fetch_bwrap.sh)")
    parser.add_argument("--local", action="store_true", help="cpu stand-ins (tests/minikern) instead of Liger")
    parser.add_argument("--apply", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--applied", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.apply is not None:
        apply_main(args.apply, args.applied)
        return
    if not args.out or not args.trace:
        parser.error("give the output directory and --trace")
    summary = Run(args).run()
    bad = [role for role, k in summary["kernels"].items()
           if not (k["outside"]["decorator_picks_approved"] and k["outside"]["export_is_approved"]
                   and k["outside"].get("correct", True))]
    if bad:
        sys.exit(f"the exported configuration is not what runs, or runs wrong: {bad}")


if __name__ == "__main__":
    main()
