"""The state machines of candidates, validation jobs and artifact versions, against the
table of allowed changes written out by hand."""

from __future__ import annotations

import itertools

import pytest

from service.artifacts.states import (
    CandidateState,
    IllegalMove,
    JobState,
    VersionState,
    check_candidate,
    check_job,
    check_version,
)

C, J, V = CandidateState, JobState, VersionState
ALLOWED = {
    "candidate": {(C.VALIDATING, C.VALIDATED), (C.VALIDATING, C.FAILED), (C.VALIDATING, C.REJECTED),
                  (C.VALIDATED, C.APPROVED), (C.VALIDATED, C.REJECTED), (C.FAILED, C.REJECTED)},
    "job": {(J.QUEUED, J.RUNNING), (J.QUEUED, J.FAILED), (J.RUNNING, J.COMPLETED), (J.RUNNING, J.FAILED),
            (J.RUNNING, J.QUEUED)},
    "version": {(V.CURRENT, V.SUPERSEDED), (V.CURRENT, V.REVOKED), (V.SUPERSEDED, V.CURRENT),
                (V.SUPERSEDED, V.REVOKED)},
}
CHECKS = {"candidate": (C, check_candidate), "job": (J, check_job), "version": (V, check_version)}


@pytest.mark.parametrize("what", sorted(CHECKS))
def test_every_pair_of_states(what: str) -> None:
    states, check = CHECKS[what]
    for old, new in itertools.product(states, states):
        if (old, new) in ALLOWED[what]:
            assert check(old.value, new) == new
        else:
            with pytest.raises(IllegalMove, match=f"that is {old.value} cannot become {new.value}"):
                check(old.value, new)


def test_nothing_leaves_an_approved_or_revoked_state() -> None:
    for new in C:
        with pytest.raises(IllegalMove):
            check_candidate("approved", new)
    for new in V:
        with pytest.raises(IllegalMove):
            check_version("revoked", new)
