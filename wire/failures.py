"""The one exception a backend, a compiler step or the sandbox raises to fail a trial."""

from __future__ import annotations

from wire.contract import FailureReason


class TrialFailure(Exception):
    """Fails the trial with a reason and a log excerpt."""

    def __init__(self, reason: FailureReason, message: str, log: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.log = log
