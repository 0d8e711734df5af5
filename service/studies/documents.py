"""From a study document as sent to its resolved, stored form (service.studies.document.
ResolvedDocument), or a 422 naming the field."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from service.errors import Invalid, field_errors, invalid
from service.scheduling import lfbo, samplers, screening
from service.studies import document as sd
from service.studies.space import SearchSpace
from wire import per_token
from wire.contract import (
    COMPILE_METRICS,
    ControlsParameter,
    DeviceLimits,
    KernelSpec,
    MeasureSettings,
    WorkloadShape,
    compile_only,
)
from wire.kernels.resources import KNOWN_LIMITS, limits_for
from wire.space import CompilerControlsParam

if TYPE_CHECKING:
    from wire.kernels import BuiltinKernel

# NVML's energy counter advances in ~100 ms steps whose energy varies a lot under the power
# cap, so an energy figure steadies as the hot window grows: ten repeats of three GEMMs spread
# by 0.8-2.1% with 1 s windows and 0.6-1.3% with 1.6 s (bench/results/gpu_energy_window.md).
ENERGY_HOT_WINDOW_S = 1.6
# After an idle gap a power-capped GPU first boosts then dips; a memory-bound kernel spends
# more energy per call in those seconds than in the steady state (RMSNorm on the H200: +1.9%
# after a 0.1 s warm-up, +0.8-1.3% after 1 s, +0.4% after 2 s; bench/results/gpu_energy_reference.md).
ENERGY_WARMUP_S = 2.0


def builtin_kernel(backend: str, name: str) -> BuiltinKernel | None:
    from wire.kernels import get_builtin

    return get_builtin(backend, name)


class Problems:
    """The errors found in a document so far, each with its field; raised together as one 422."""

    def __init__(self) -> None:
        self.errors: list[dict[str, str]] = []

    def add(self, field: str, message: str) -> None:
        if {"field": field, "message": message} not in self.errors:
            self.errors.append({"field": field, "message": message})

    @contextmanager
    def collect(self) -> Iterator[None]:
        """Note the DocumentError or pydantic errors the block raises, and go on."""
        try:
            yield
        except sd.DocumentError as exc:
            self.add(exc.field, exc.message)
        except ValidationError as exc:
            for error in field_errors(exc.errors()):
                self.add(error["field"], error["message"])

    def raise_any(self) -> None:
        if self.errors:
            raise invalid(self.errors)


def validate(raw: Any, pools: Collection[str] | None = None) -> sd.ResolvedDocument:
    """Parse and check a study document; returns its resolved form or raises Invalid with
    every error found: the schema's and, in the same pass, the names nothing knows (objectives,
    metrics, kernels, the pool: one of `pools` where given)."""
    if not isinstance(raw, dict):
        raise Invalid("a study document is a JSON/YAML object", field=None)
    problems = Problems()
    with problems.collect():
        sd.check_shape(raw)
    problems.raise_any()  # too deep, NUL or NaN: nothing else walks such a document
    doc = None
    with problems.collect():
        doc = sd.StudyDocument.model_validate(raw)
    for field, message in unknown_names(raw, pools):
        problems.add(field, message)
    problems.raise_any()
    assert doc is not None
    with problems.collect():
        resolved = _resolve(doc)
    problems.raise_any()
    return resolved


def unknown_names(raw: dict[str, Any], pools: Collection[str] | None) -> Iterator[tuple[str, str]]:
    """(field, what is wrong) for each name the raw document uses that nothing knows, read
    wherever the document has it right whatever else is wrong."""
    kernel: dict[str, Any] = raw["kernel"] if isinstance(raw.get("kernel"), dict) else {}
    backend = kernel.get("backend")
    objectives: list[Any] = raw["objectives"] if isinstance(raw.get("objectives"), list) else []
    names = []
    for i, objective in enumerate(objectives):
        name = objective.get("name") if isinstance(objective, dict) else objective
        if isinstance(name, str):
            names.append(name)
            problem = sd.unknown_objective(name, backend)
            if problem:
                yield f"objectives.{i}.name", problem
    constraints: list[Any] = raw["constraints"] if isinstance(raw.get("constraints"), list) else []
    for i, constraint in enumerate(constraints):
        metric = constraint.get("metric") if isinstance(constraint, dict) else None
        problem = sd.unknown_metric(metric, names) if isinstance(metric, str) else None
        if problem:
            yield f"constraints.{i}.metric", problem
    builtin = kernel.get("builtin")
    if isinstance(builtin, str) and backend in sd.BACKENDS and builtin_kernel(backend, builtin) is None:
        yield "kernel.builtin", f"no built-in {backend} kernel named {builtin!r}"
    pool = raw.get("pool", "default")
    if pools is not None and isinstance(pool, str) and pool not in pools:
        yield "pool", (f"unknown pool {pool!r}: no worker is in it, no worker token is for it and the operator has "
                       f"not set it; use one of {', '.join(sorted(pools)[:20])}")


def _resolve(doc: sd.StudyDocument) -> sd.ResolvedDocument:
    objectives = sd.resolve_objectives(doc)
    kernel, space, builtin_default = _kernel(doc)
    _per_token(objectives, kernel)
    baseline = sd.resolve_baseline(space, doc.baseline, builtin_default)
    sampler, options, ordered = samplers.resolve(doc.sampler.name, doc.sampler.options, len(objectives),
                                                 lfbo.auto_picks(space, kernel.builtin))
    if sampler == "lfbo" and not lfbo.enumerable(space):
        raise sd.DocumentError("sampler.name", f"lfbo scores every configuration of a finite space of at most "
                               f"{lfbo.MAX_POINTS:,} without floats; this one is not: use auto, nsga2 or tpe")
    _controls(space, sampler, kernel.backend)
    if sampler == "compileiq" and doc.measure.screen is not None:
        raise sd.DocumentError("measure.screen", "CompileIQ's engine is told each candidate's full measurement: "
                               "leave measure.screen out, or use nsga2 or tpe to screen")
    # a pack's files are the choices of its parameter once the study is made (service.controls.studies)
    packs = any(p.pack for p in space.controls)
    grid = sd.check_grid(space) if sampler == "grid" and not packs else None
    samplers.check(sampler, doc.sampler.seed, options, n_objectives=len(objectives))
    reference = sd.reference_point(doc, objectives)
    kernel.controls = {p.name: ControlsParameter(compiler=p.compiler, version=p.version) for p in space.controls}
    compile_only = _compile_only(doc, objectives, kernel)
    warm = doc.sampler.warm_start
    if warm is not None and sampler == "grid":
        raise sd.DocumentError("sampler.warm_start", "the grid sampler walks the whole grid: leave warm_start out")
    if doc.warm_start == "related" and sampler == "grid":
        raise sd.DocumentError("warm_start", "the grid sampler walks the whole grid: leave warm_start out or "
                               "set it to none")
    # related studies' best configurations first: by default for built-ins (any space but a grid's)
    warm_start = doc.warm_start or ("related" if kernel.builtin and sampler != "grid" else "none")
    return sd.ResolvedDocument(
        name=doc.name, description=doc.description, kernel=kernel, space=space.parameters, baseline=baseline,
        objectives=objectives, constraints=doc.constraints,
        sampler=sd.ResolvedSampler(
            name=sampler, seed=doc.sampler.seed, options=options,
            ordered_choices=ordered if doc.sampler.ordered_choices is None else doc.sampler.ordered_choices,
            warm_start=None if warm is None else sd.ResolvedWarmStart(
                studies=warm.studies, trials=warm.trials,
                configs=[sd.warm_config(space, c, baseline, f"sampler.warm_start.configs.{i}")
                         for i, c in enumerate(warm.configs)])),
        budget=_budget(doc.budget, grid), parallelism=doc.parallelism, pool=doc.pool, limits=doc.limits,
        priority=doc.priority, weight=doc.weight,
        measure=_measure(doc, objectives, kernel.backend), target=_target(doc.target, kernel.backend),
        reference_point=reference, warm_start=warm_start, share_trials=doc.share_trials, compile_only=compile_only,
    )


def _kernel(doc: sd.StudyDocument) -> tuple[KernelSpec, SearchSpace, dict[str, Any]]:
    """The kernel with a built-in's workload where the document gives none, the space (the
    document's, else the built-in's) and the built-in's baseline."""
    given = doc.kernel.model_dump(exclude={"module"})
    kernel = KernelSpec.model_validate({**given, "entry": doc.kernel.module} if doc.kernel.module else given)
    space = SearchSpace(doc.space) if doc.space is not None else None
    if not kernel.builtin:
        if space is None:
            raise sd.DocumentError("space", f"a kernel given by {'module' if doc.kernel.module else 'source'} needs "
                                   "a search space (and its baseline: the library's own choice, in baseline)")
        return kernel, space, {}
    builtin = builtin_kernel(kernel.backend, kernel.builtin)
    if builtin is None:
        raise sd.DocumentError("kernel.builtin", f"no built-in {kernel.backend} kernel named {kernel.builtin!r}")
    if not kernel.workload and builtin.workload:
        kernel.workload = [WorkloadShape.model_validate(w) for w in builtin.workload]
    return kernel, space if space is not None else SearchSpace(builtin.space), dict(builtin.default_config)


def _per_token(objectives: list[sd.ResolvedObjective], kernel: KernelSpec) -> None:
    """Per-token objectives need the token dim in every shape of the workload (wire.per_token)."""
    named = [o.name for o in objectives if o.name in per_token.SOURCES]
    if named:
        try:
            per_token.tokens_per_call(kernel.workload, per_token.token_dim(kernel))
        except ValueError as exc:
            field = "kernel.options.token_dim" if kernel.workload else "kernel.workload"
            raise sd.DocumentError(field, f"{', '.join(named)}: {exc}") from None


def _budget(budget: sd.Budget, grid: int | None) -> sd.ResolvedBudget:
    """The caps the document leaves out, from max_trials; a grid study's trials are at most
    the whole grid, after the baseline."""
    return sd.ResolvedBudget.model_validate({
        **budget.model_dump(),
        "max_trials": budget.max_trials if grid is None else min(budget.max_trials, grid + 1),
        "max_failed_trials": budget.max_trials // 2 + 5 if budget.max_failed_trials is None
        else budget.max_failed_trials,
        "max_infeasible": budget.max_trials if budget.max_infeasible is None else budget.max_infeasible,
    })


def _controls(space: SearchSpace, sampler: str, backend: str) -> None:
    """The space's compiler controls parameters: for a backend that applies them, and those
    whose files CompileIQ's engine generates only with that engine."""
    for index, param in ((i, p) for i, p in enumerate(space.parameters) if isinstance(p, CompilerControlsParam)):
        field = f"space.{index}"
        if backend not in sd.GPU_BACKENDS | {"ptx"}:
            raise sd.DocumentError(f"{field}.type", f"compiler controls apply to GPU kernels (triton, ptx, cuda), "
                                   f"not to {backend!r} ones")
        if param.compiler != "ptxas":
            raise sd.DocumentError(f"{field}.compiler", "only ptxas controls files are applied so far; use "
                                   "compiler: ptxas")
        if param.engine and sampler != "compileiq":
            raise sd.DocumentError(
                "sampler.name", f"{param.name!r} is searched by CompileIQ's engine, which generates its files: set "
                f"sampler.name to compileiq, or give {field}.pack (a Booster Pack's files) for any other sampler")


def _compile_only(doc: sd.StudyDocument, objectives: list[sd.ResolvedObjective], kernel: KernelSpec) -> bool:
    """Whether the study compiles and never runs (every objective and constraint is a compile
    metric: no GPU needed); its target then goes to the kernel's options."""
    metrics = [o.name for o in objectives] + [c.metric for c in doc.constraints]
    # compile time alone is measured by every backend's own compile, as it always was
    only = compile_only(metrics) and (set(metrics) != {"compile_s"} or kernel.backend == "ptx")
    fields = [f"objectives.{i}.name" for i in range(len(objectives))] + \
             [f"constraints.{i}.metric" for i in range(len(doc.constraints))]
    compiled = sorted(COMPILE_METRICS.keys() - {"compile_s"})
    if not only:
        for field, name in zip(fields, metrics, strict=True):
            if name in COMPILE_METRICS and name != "compile_s":
                raise sd.DocumentError(field, f"{name!r} is what the compiler reports of a build: a study with it "
                                       f"compiles and never runs, so every objective and constraint must be one of "
                                       f"{', '.join(COMPILE_METRICS)}; measure runtime objectives in another study")
        if kernel.backend == "ptx":
            raise sd.DocumentError("objectives", f"a ptx kernel is compiled, never run: its objectives are compile "
                                   f"metrics ({', '.join(COMPILE_METRICS)})")
        return False
    if kernel.backend not in sd.COMPILE_ONLY_BACKENDS:
        raise sd.DocumentError("kernel.backend", f"compile metrics ({', '.join(compiled)}) come from ptxas: use the "
                               f"triton or ptx backend, not {kernel.backend!r}")
    if doc.measure.screen is not None:
        raise sd.DocumentError("measure.screen", "a compile-only study measures nothing to screen: leave "
                               "measure.screen out")
    capability = doc.target.compute_capability if doc.target else None
    if capability is None and not kernel.options.get("arch"):
        raise sd.DocumentError("target.compute_capability", "a compile-only study builds for a GPU it does not "
                               "need: name it, e.g. target: {compute_capability: \"9.0\"} (or kernel.options.arch)")
    if capability is not None:
        kernel.options["compute_capability"] = capability
    return True


def _measure(doc: sd.StudyDocument, objectives: list[sd.ResolvedObjective], backend: str) -> sd.StudyMeasure:
    """The full measurement's settings (energy objectives on a GPU get the windows energy
    needs, unless the document sets them), and the screening stage and promotion rule with
    their defaults; a study without a screen has neither."""
    full = doc.measure.model_dump(exclude={"screen", "promote"})
    if {o.name for o in objectives} & sd.ENERGY_OBJECTIVES and backend in sd.GPU_BACKENDS:
        for name, value in (("hot_window_s", ENERGY_HOT_WINDOW_S), ("warmup_s", ENERGY_WARMUP_S)):
            if name not in doc.measure.model_fields_set:
                full[name] = value
    settings = MeasureSettings.model_validate(full)
    if doc.measure.screen is not None:
        screen, promote = screening.resolve(objectives, backend, doc.measure.screen, doc.measure.promote, settings)
        return sd.StudyMeasure(**full, screen=screen, promote=promote)
    if doc.measure.promote is not None:
        raise sd.DocumentError("measure.promote",
                               "a promotion rule needs a screening stage: add measure.screen ({} for its defaults)")
    return sd.StudyMeasure(**full)


def _target(target: sd.Target | None, backend: str) -> DeviceLimits | None:
    """The device limits the document names: those of its compute capability, overridden by
    any it gives itself."""
    if target is None:
        return None
    if backend not in sd.GPU_BACKENDS | {"ptx"}:
        raise sd.DocumentError("target", f"device limits apply to GPU kernels (triton, cuda, ptx), not {backend!r}")
    given = target.model_dump(exclude_none=True)
    base: dict[str, Any] = {}
    if target.compute_capability is not None:
        known = limits_for(target.compute_capability)
        if known is None and target.shared_memory_per_block is None:
            raise sd.DocumentError(
                "target.compute_capability",
                f"no known limits for compute capability {target.compute_capability!r} (known: "
                f"{', '.join(KNOWN_LIMITS)}); give target.shared_memory_per_block and the other limits",
            )
        base = known.model_dump() if known else {}
    elif target.shared_memory_per_block is None:
        raise sd.DocumentError("target", "name target.compute_capability or target.shared_memory_per_block")
    return DeviceLimits.model_validate({**base, **given})
