"""One state machine per entity, against tables of legal moves written out here by hand: every
move of every entity is tried through its machine and through its one transition function,
and every illegal one is refused. And a scan of the code for every write of a state column
outside those transition functions."""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from service.artifacts import audit
from service.artifacts.states import CANDIDATE, JOB, VALIDATION, VERSION, CandidateState, JobState, VersionState
from service.artifacts.transitions import (
    transition_candidate,
    transition_job,
    transition_validation,
    transition_version,
)
from service.domain.machines import IllegalTransition, StateMachine
from service.domain.states import STUDY, TRIAL, StudyState, TrialState
from service.store.db import Database
from service.store.effects import effects
from service.store.migrate import upgrade
from service.store.models import Artifact, ArtifactVersion, Candidate, Study, Trial, Validation, ValidationJob
from service.studies import lifecycle
from service.trials import transitions

REPO = Path(__file__).resolve().parents[2]

# entity -> (where its rows start, {state: the states it may move to})
LEGAL: dict[str, tuple[str, dict[str, set[str]]]] = {
    "trial": ("queued", {
        "queued": {"running", "paused", "cancelled", "failed"},
        "paused": {"queued", "cancelled"},
        "running": {"completed", "screened", "failed", "queued", "paused", "cancelled"},
        "screened": {"queued", "paused", "cancelled", "screened_out"},
        "completed": set(), "screened_out": set(), "failed": set(), "cancelled": set(),
    }),
    "study": ("running", {
        "running": {"paused", "completed", "cancelled", "failed"},
        "paused": {"running", "completed", "cancelled", "failed"},
        "completed": set(), "cancelled": set(), "failed": set(),
    }),
    "validation job": ("queued", {
        "queued": {"running", "failed"},
        "running": {"completed", "failed", "queued"},
        "completed": set(), "failed": set(),
    }),
    "validation": ("queued", {
        "queued": {"running", "failed"},
        "running": {"completed", "failed"},
        "completed": set(), "failed": set(),
    }),
    "candidate": ("validating", {
        "validating": {"validated", "failed", "rejected"},
        "validated": {"approved", "rejected"},
        "failed": {"rejected"},
        "approved": set(), "rejected": set(),
    }),
    "artifact version": ("current", {
        "current": {"superseded", "revoked"},
        "superseded": {"current", "revoked"},
        "revoked": set(),
    }),
}
MACHINES: dict[str, StateMachine[Any]] = {m.entity: m for m in (TRIAL, STUDY, JOB, VALIDATION, CANDIDATE, VERSION)}


def pairs(entity: str) -> Iterator[tuple[str, str, bool]]:
    """Every (old, new) pair of the entity's states, and whether the table allows it."""
    moves = LEGAL[entity][1]
    for old, new in itertools.product(moves, moves):
        yield old, new, new in moves[old]


@pytest.mark.parametrize("entity", sorted(LEGAL))
def test_every_move_of_every_machine(entity: str) -> None:
    machine = MACHINES[entity]
    initial, moves = LEGAL[entity]
    assert issubclass(machine.states, StrEnum) and {s.value for s in machine.states} == set(moves)
    assert machine.initial == initial
    assert machine.final == {state for state, targets in moves.items() if not targets}
    for old, new, legal in pairs(entity):
        assert machine.allows(old, new) is legal, (old, new)
        if legal:
            assert machine.check(old, new) == new
            continue
        with pytest.raises(IllegalTransition) as refused:
            machine.check(old, new)
        assert refused.value.status == 409 and refused.value.field == "state"
        assert str(refused.value) == f"a {entity} that is {old} cannot become {new}"


# -- through each entity's one transition function, on a real database ------------------------


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path_factory.mktemp('machines') / 'paretune.db'}")
    upgrade(database.engine)
    yield database
    database.dispose()


@dataclass(frozen=True)
class Mover:
    """A fresh row of the entity in a state, and the entity's transition function on it."""

    row: Callable[[str], Any]
    move: Callable[[Session, Any, str], None]


ARTIFACT = Artifact(current_version=1)  # whose versions move: it follows them

MOVERS = {
    "trial": Mover(lambda state: Trial(study_id=1, pool="p", state=state, told=False),
                   lambda session, row, to: transitions.transition(session, row, TRIAL.states(to))),
    "study": Mover(lambda state: Study(id=1, state=state),
                   lambda session, row, to: lifecycle.transition(session, row, STUDY.states(to))),
    "validation job": Mover(lambda state: ValidationJob(pool="p", state=state),
                            lambda session, row, to: transition_job(session, row, JOB.states(to))),
    "validation": Mover(lambda state: Validation(state=state),
                        lambda session, row, to: transition_validation(session, row, VALIDATION.states(to))),
    "candidate": Mover(lambda state: Candidate(id=1, team_id=1, state=state),
                       lambda session, row, to: transition_candidate(session, row, CANDIDATE.states(to),
                                                                     audit.Actor("approver", 1), "why")),
    "artifact version": Mover(lambda state: ArtifactVersion(version=2, state=state),
                              lambda session, row, to: transition_version(session, row, VERSION.states(to), ARTIFACT)),
}


@pytest.mark.parametrize("entity", sorted(LEGAL))
def test_every_move_through_the_transition_function(db: Database, entity: str) -> None:
    mover = MOVERS[entity]
    with db.sessions() as session:
        for old, new, legal in pairs(entity):
            row = mover.row(old)
            if legal:
                mover.move(session, row, new)
                assert row.state == new, (old, new)
            else:
                with pytest.raises(IllegalTransition):
                    mover.move(session, row, new)
                assert row.state == old, (old, new)  # a refused move changes nothing
        session.rollback()


def test_moves_register_what_they_wake(db: Database) -> None:
    with db.sessions() as session:
        queued = Trial(study_id=7, pool="gpu", state="paused", told=False)
        transitions.transition(session, queued, TrialState.QUEUED)
        assert effects(session).pools == {"gpu": 1} and effects(session).channels == {"study:7"}
        assert not effects(session).steps  # nothing for the step to account for
        transitions.transition(session, Trial(study_id=8, pool="gpu", state="running", told=False),
                               TrialState.COMPLETED)
        assert effects(session).steps == {8}  # a result: the study's step accounts for it
        transitions.transition(session, Trial(study_id=9, pool="gpu", state="queued", told=False),
                               TrialState.CANCELLED, told=True)
        assert effects(session).steps == {8}  # accounted for already
        study = Study(id=9, state="paused")
        lifecycle.transition(session, study, StudyState.RUNNING)
        assert effects(session).steps == {8, 9}  # it runs again: its step queues trials
        assert {"study:9", "studies"} <= effects(session).channels
        transition_job(session, ValidationJob(pool="cpu", state="running"), JobState.QUEUED)
        assert effects(session).pools == {"gpu": 1, "cpu": None}  # a validation job wakes every waiter
        session.rollback()
        assert "effects" not in session.info  # a rollback drops them


def test_an_artifacts_current_version_follows_its_versions() -> None:
    artifact = Artifact(current_version=1)
    first, second = ArtifactVersion(version=1, state="current"), ArtifactVersion(version=2, state="superseded")
    with Session() as session:
        transition_version(session, first, VersionState.SUPERSEDED, artifact)
        assert artifact.current_version is None
        transition_version(session, second, VersionState.CURRENT, artifact)  # a rollback to version 2
        assert artifact.current_version == 2
        transition_version(session, first, VersionState.REVOKED, artifact)
        assert artifact.current_version == 2
        transition_version(session, second, VersionState.REVOKED, artifact)
        assert artifact.current_version is None


def test_every_move_of_a_candidate_is_audited() -> None:
    actor = audit.Actor("approver", 4)
    with Session() as session:
        verdicts = [Candidate(id=1, team_id=3, state="validating"), Candidate(id=2, team_id=3, state="validating")]
        transition_candidate(session, verdicts[0], CandidateState.VALIDATED, audit.Actor.of(None), "x1.2")
        transition_candidate(session, verdicts[1], CandidateState.FAILED, audit.Actor.of(None), "wrong")
        transition_candidate(session, verdicts[0], CandidateState.APPROVED, actor, "ship it", {"version": 1})
        transition_candidate(session, verdicts[1], CandidateState.REJECTED, actor, "wrong on odd sizes")
        entries = [(e.action, e.subject_id, e.actor, e.why, e.details) for e in session.new]
    assert sorted(entries) == sorted([
        ("validated", 1, "service", "x1.2", {}), ("validation_failed", 2, "service", "wrong", {}),
        ("approve", 1, "approver", "ship it", {"version": 1}), ("reject", 2, "approver", "wrong on odd sizes", {}),
    ])
    assert [c.decided_by_name for c in verdicts] == ["approver", "approver"]
    assert verdicts[1].reason == "wrong on odd sizes"


# -- every write of a state column is a transition -------------------------------------------

# the entities' transition functions
TRANSITIONS = {
    ("service/trials/transitions.py", "transition"),
    ("service/studies/lifecycle.py", "transition"),
    ("service/artifacts/transitions.py", "transition_candidate"),
    ("service/artifacts/transitions.py", "transition_validation"),
    ("service/artifacts/transitions.py", "transition_job"),
    ("service/artifacts/transitions.py", "transition_version"),
}
# writes that are no entity's transition, each with its reason
ALLOWED = {
    ("service/trials/leases.py", "_lease_statement"):
        "the lease queue's one statement that leases a unit of any kind of work, its move checked by the "
        "kind's machine; the kind registers what it wakes",
    ("service/trials/leases.py", "_record_statement"):
        "the lease queue's one statement that records a report of any kind of work, checked likewise",
    ("service/trials/leases.py", "_expiry_statement"):
        "the lease queue's one statement that hands back or fails units of any kind whose lease expired, "
        "each move checked likewise",
    ("service/scheduling/engine.py", "EngineMirror.persist"):
        "the sampler checkpoint's `state` column holds CompileIQ's checkpoint bytes, not an entity's state",
}
SET_STATE = re.compile(r"\bSET\s+state\b", re.IGNORECASE)


def state_writes(source: str) -> list[tuple[str, int]]:
    """(the enclosing function's qualified name, line) of every write of a `state` column:
    `x.state = ...`, `setattr(x, "state", ...)`, `state=` or a "state" key in a `.values(...)`
    or `update(...)` call, and raw SQL that sets state."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(child, f"{scope}.{child.name}" if scope else child.name)
                continue
            if _writes_state(child):
                found.append((scope, child.lineno))
            visit(child, scope)

    visit(parse(source), "")
    return found


def parse(source: str) -> ast.Module:
    """ast.parse, again where CPython 3.11 reports "AST constructor recursion depth mismatch":
    its AST validator keeps its depth in global state, which another thread compiling at the
    same moment (a module imported by a server thread of the same test process) upsets."""
    for _ in range(2):
        try:
            return ast.parse(source)
        except SystemError:
            continue
    return ast.parse(source)


def _writes_state(node: ast.AST) -> bool:
    if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        flat = [t for target in targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
        return any(isinstance(t, ast.Attribute) and t.attr == "state" for t in flat)
    if isinstance(node, ast.Call) and _called(node) == "setattr":
        return len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "state"
    if isinstance(node, ast.Call) and _called(node) in ("values", "update"):
        keys = [k.value for arg in node.args if isinstance(arg, ast.Dict) for k in arg.keys
                if isinstance(k, ast.Constant)]
        return "state" in keys or any(k.arg == "state" for k in node.keywords)
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(SET_STATE.search(node.value))


def _called(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return call.func.id if isinstance(call.func, ast.Name) else None


def test_the_scan_finds_every_kind_of_state_write() -> None:
    source = '''
def direct(row):
    row.state = "queued"
def several(job):
    job.state, job.phase = "running", None
def core(session):
    session.execute(update(Trial).where(Trial.id == 1).values(state="failed"))
def mapping(session):
    session.execute(update(Trial).values({"state": "failed"}))
def raw(session):
    session.execute(text("UPDATE trials SET state = 'failed'"))
def named(row):
    setattr(row, "state", "failed")
class Thing:
    def method(self, row):
        row.state = "x"
def reads(row, session):
    session.execute(select(Trial).where(Trial.state == "queued").values(seq=1))
    return row.state
'''
    assert [scope for scope, _ in state_writes(source)] == ["direct", "several", "core", "mapping", "raw", "named",
                                                           "Thing.method"]


def test_state_columns_are_written_only_by_transitions() -> None:
    writers: dict[tuple[str, str], list[int]] = {}
    for path in sorted((REPO / "service").rglob("*.py")):
        relative = str(path.relative_to(REPO))
        for scope, line in state_writes(path.read_text()):
            writers.setdefault((relative, scope), []).append(line)
    stray = {f"{path}:{lines[0]} ({scope})" for (path, scope), lines in writers.items()
             if (path, scope) not in TRANSITIONS and (path, scope) not in ALLOWED}
    assert not stray, "write a state column through its entity's transition function"
    assert TRANSITIONS | ALLOWED.keys() == writers.keys()  # every transition writes; no stale allowance
