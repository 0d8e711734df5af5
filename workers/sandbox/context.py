"""The execution context of a trial or a validation job: what its phases run with besides
the work itself. The agent makes one (its cache, sandbox, warm runners and CPUs) and hands
each piece of leased work a copy with that work's cancel event and phase callback.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from workers.cache import ArtifactCache
from workers.sandbox.runner import RunnerPool
from workers.sandbox.sandbox import Sandbox, default_sandbox


@dataclass(frozen=True)
class Context:
    """`cache`: where builds are kept, verified before every use. `sandbox`: how sandbox
    processes run (isolation level, the worker's caps on a trial's limits, work directory).
    `runners`: warm runners (None: a fresh process per phase). `compile_cpus`, `run_cpus`:
    the CPUs each phase's process is pinned to (None: any). `cancel`: set when the work is
    to be dropped (its sandbox is killed). `on_phase`: told what the run phase is doing.
    `on_rounds`: told the seconds each round took so far, as a run phase measuring in rounds
    times them."""

    cache: ArtifactCache
    sandbox: Sandbox = field(default_factory=default_sandbox)
    runners: RunnerPool | None = None
    compile_cpus: list[int] | None = None
    run_cpus: list[int] | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    on_phase: Callable[[str], None] | None = None
    on_rounds: Callable[[list[float]], None] | None = None

    def __post_init__(self) -> None:
        if self.runners is not None and self.runners.sandbox is not self.sandbox:
            raise ValueError("the warm runners belong to another sandbox than the context's")

    def cpus(self, phase: str) -> list[int] | None:
        return self.compile_cpus if phase == "compile" else self.run_cpus

    def for_work(self, cancel: threading.Event, on_phase: Callable[[str], None] | None = None,
                 on_rounds: Callable[[list[float]], None] | None = None) -> Context:
        """This context for one piece of work: its cancel event and progress callbacks."""
        return replace(self, cancel=cancel, on_phase=on_phase, on_rounds=on_rounds)
