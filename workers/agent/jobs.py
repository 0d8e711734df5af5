"""What a worker does with each kind of leased work: one Job per lease.

The agent's loops know no kind: a leaser thread `compile`s each job (on the compile CPUs,
off the device), the measuring thread `run`s it (holding the device) and posts its `report`
to the one result endpoint. A kind of work is a Job class registered under the kind's name
(`register`); the agent registers with the service the kinds it has a Job for.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import ClassVar

from wire.contract import (
    FailureReason,
    Fingerprint,
    Lease,
    ResultAck,
    TrialResult,
    TrialSpec,
    ValidationAck,
    ValidationReport,
    ValidationSpec,
    WorkAck,
    WorkReport,
)
from workers.sandbox.context import Context
from workers.sandbox.stages import CompileStage, compile_trial, failed, run_trial
from workers.validation.report import describe_lease, describe_report, failed_report
from workers.validation.stages import ValidationBuild, compile_validation, run_validation


class Job(ABC):
    """One leased unit of work on this worker. Its `context` (workers.sandbox.context) is the
    agent's for this work: its `cancel` is set when the lease is dropped (lost, cancelled, the
    agent aborting), its `on_phase` shows the phase in the lease's heartbeats. `fingerprint`:
    what the worker registered as."""

    kind: ClassVar[str]
    ack: ClassVar[type[WorkAck]] = WorkAck  # the service's acknowledgement of its report

    def __init__(self, lease: Lease, context: Context, fingerprint: Fingerprint | None = None) -> None:
        self.lease, self.context, self.fingerprint = lease, context, fingerprint
        self.outcome: WorkReport | None = None

    @property
    def cancel(self) -> threading.Event:
        return self.context.cancel

    def show(self, phase: str) -> None:
        if self.context.on_phase is not None:
            self.context.on_phase(phase)

    @property
    @abstractmethod
    def label(self) -> str:
        """The job in log lines."""

    def leased(self) -> str:
        """What was leased, for the log."""
        return f"{self.label} leased"

    @abstractmethod
    def compile(self) -> None:
        """Build what `run` needs (a failure to build is the job's outcome)."""

    def compiled(self) -> str | None:
        """How the compile went, for the log (None: nothing worth a line)."""
        return None

    @abstractmethod
    def run(self) -> None:
        """Check and measure on the device; the outcome stays None when it was abandoned."""

    @abstractmethod
    def failed(self, message: str) -> WorkReport:
        """The report of a job the worker itself failed to run."""

    @property
    def first(self) -> bool:
        """Whether the job measures before the compiled jobs already waiting for the device."""
        return False

    def report(self) -> WorkReport | None:
        """What to post for the lease: the outcome, or None when the job was abandoned."""
        return None if self.cancel.is_set() else self.outcome

    def describe(self, report: WorkReport) -> str:
        """A posted report, for the log."""
        reason = report.failure_reason.value if report.failure_reason else "?"
        return "completed" if report.status == "completed" else f"failed ({reason}): {report.message}"


JOBS: dict[str, type[Job]] = {}


def register(kind: str, job: type[Job]) -> None:
    """Run leases of `kind` as `job`s (the agent offers the service every registered kind)."""
    JOBS[kind] = job


def unregister(kind: str) -> None:
    JOBS.pop(kind, None)


class TrialJob(Job):
    kind: ClassVar[str] = "trial"
    ack: ClassVar[type[WorkAck]] = ResultAck

    def __init__(self, lease: Lease, context: Context, fingerprint: Fingerprint | None = None) -> None:
        super().__init__(lease, context, fingerprint)
        self.spec = TrialSpec.model_validate(lease.work)
        self.stage: CompileStage | None = None

    @property
    def label(self) -> str:
        t = self.spec
        stage = f", {t.stage} stage" if t.stage else ""
        return f"trial {t.trial_id} (study {t.study_id} #{t.number}, attempt {t.attempt}{stage})"

    @property
    def first(self) -> bool:
        """A promoted trial's full stage: its study's front (and the decision on the screens
        waiting for it) hangs on it, so it goes before the screens leased ahead of it."""
        return self.spec.stage == "full"

    def leased(self) -> str:
        kernel = self.spec.kernel
        what = kernel.source if kernel.backend == "python" and kernel.source else kernel.builtin or kernel.entry
        return f"{self.label} leased: {kernel.backend}/{what or 'source'} config {self.spec.config}"

    def compile(self) -> None:
        self.stage = compile_trial(self.spec, self.context)

    def compiled(self) -> str | None:
        stage = self.stage
        if stage is None or stage.abandoned:
            return None
        if stage.failure is not None:
            return f"compile failed after {stage.wall_s:.2f} s: {stage.failure.message}"
        return f"compiled in {stage.wall_s:.2f} s{' (cached)' if stage.cached else ''}" if stage.key else None

    def run(self) -> None:
        if self.stage is None:
            return
        self.show("check")
        self.outcome = run_trial(self.spec, self.stage, self.context)

    def failed(self, message: str) -> TrialResult:
        return failed(FailureReason.ERROR, message)

    def describe(self, report: WorkReport) -> str:
        assert isinstance(report, TrialResult)
        t = report.timings
        timing = ", ".join(f"{name} {t[key]:.2f} s" for name, key in
                           (("compile", "compile_wall_s"), ("check", "check_s"), ("measure", "measure_s")) if key in t)
        if report.status == "completed":
            values = " ".join(f"{k}={m.value:.4g}{m.unit and ' ' + m.unit}" for k, m in report.metrics.items())
            return f"completed: {values} [{timing}]"
        return f"{super().describe(report)} [{timing}]"


class ValidationJob(Job):
    kind: ClassVar[str] = "validation"
    ack: ClassVar[type[WorkAck]] = ValidationAck

    def __init__(self, lease: Lease, context: Context, fingerprint: Fingerprint | None = None) -> None:
        super().__init__(lease, context, fingerprint)
        self.spec = ValidationSpec.model_validate(lease.work)
        self.build: ValidationBuild | None = None

    @property
    def label(self) -> str:
        return describe_lease(self.spec)

    def compile(self) -> None:
        self.build = compile_validation(self.spec, self.context)

    def run(self) -> None:
        if self.build is None:
            return
        self.outcome = run_validation(self.build, self.context, self.fingerprint)

    def failed(self, message: str) -> ValidationReport:
        return failed_report(self.spec, FailureReason.ERROR, message)

    def describe(self, report: WorkReport) -> str:
        assert isinstance(report, ValidationReport)
        return describe_report(report)


register(TrialJob.kind, TrialJob)
register(ValidationJob.kind, ValidationJob)
