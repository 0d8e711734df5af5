"""Configurations that cannot launch, refused before they are queued.

Where the service knows the limits of the GPU a study tunes for (the document's `target`,
else what the workers of its pool report in their fingerprints) and the kernel is a built-in
with a resource model (wire.kernels.resources), a proposal over those limits is recorded
as failed with reason `infeasible` in the step that asked for it: no worker leases it, no
compile runs. Elsewhere the worker finds the same before compiling, or from the compiled
kernel, and reports the same reason.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.store.models import Study, Worker
from service.studies.document import ResolvedDocument
from wire.contract import DeviceLimits
from wire.kernels import get_builtin, resource_violations
from wire.kernels.resources import Violation, describe

POOL_LIMITS_TTL_S = 30.0  # how long a study's step keeps what its pool's workers reported
LIMIT_FIELDS = ("shared_memory_per_block", "threads_per_block", "registers_per_block", "registers_per_thread")


class Feasibility:
    """One study's check, kept with its sampler mirror between steps."""

    def __init__(self, document: ResolvedDocument) -> None:
        kernel = document.kernel
        builtin = get_builtin(kernel.backend, kernel.builtin) if kernel.builtin else None
        self.backend = kernel.backend
        self.builtin: str | None = kernel.builtin if builtin is not None and builtin.resources else None
        self.shapes = [shape.dims for shape in kernel.workload]
        self.fixed = document.target
        self._pool: tuple[float, DeviceLimits | None] | None = None

    def limits(self, session: Session, study: Study) -> DeviceLimits | None:
        if self.builtin is None:
            return None
        if self.fixed is not None:
            return self.fixed
        now = time.monotonic()
        if self._pool is None or now - self._pool[0] > POOL_LIMITS_TTL_S:
            self._pool = (now, pool_limits(session, study.pool, self.backend))
        return self._pool[1]

    def refusal(self, session: Session, study: Study, params: dict[str, Any]) -> Refusal | None:
        """Why `params` cannot launch on the study's target; None when it can, or when the
        service cannot tell."""
        limits = self.limits(session, study)
        if limits is None or self.builtin is None:
            return None
        found = resource_violations(self.backend, self.builtin, params, self.shapes, limits)
        return Refusal(found, limits) if found else None


class Refusal:
    def __init__(self, violations: list[Violation], limits: DeviceLimits) -> None:
        self.violations = violations
        self.limits = limits

    @property
    def message(self) -> str:
        return describe(self.violations, self.limits) + " (refused before queuing)"

    def report(self) -> dict[str, Any]:
        """Kept as the trial's compile report: what it would have needed, and where."""
        return {"resources": {"refused_by": "service", "limits": self.limits.model_dump(),
                              "violations": [v.as_dict() for v in self.violations]}}


def pool_limits(session: Session, pool: str, backend: str) -> DeviceLimits | None:
    """The most a worker of `pool` that runs `backend` allows, limit by limit: a
    configuration is refused only where no worker there could launch it. None when no such
    worker has reported its limits."""
    rows = session.execute(select(Worker.fingerprint, Worker.backends).where(Worker.pool == pool)).all()
    reported = [DeviceLimits.model_validate(fp["device_limits"]) for fp, backends in rows
                if backend in (backends or []) and isinstance(fp, dict) and fp.get("device_limits")]
    if not reported:
        return None
    capabilities = {limits.compute_capability for limits in reported}
    return DeviceLimits(
        compute_capability=capabilities.pop() if len(capabilities) == 1 else None,
        **{name: max(getattr(limits, name) for limits in reported) for name in LIMIT_FIELDS},
    )
