"""A state machine: an entity's states and the moves allowed between them. No I/O: each
entity's one transition function (service.trials.transitions, service.studies.lifecycle,
service.artifacts.transitions) checks its move here before it changes the row."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Generic, TypeVar

from service.errors import Conflict

S = TypeVar("S", bound=StrEnum)


class IllegalTransition(Conflict):
    """A move its entity's machine does not allow (a 409 when nothing more specific is said)."""

    def __init__(self, entity: str, old: str, new: str) -> None:
        super().__init__(f"a {entity} that is {old} cannot become {new}", field="state")
        self.entity, self.old, self.new = entity, old, new


class StateMachine(Generic[S]):
    """The states `S` of `entity`, where its rows start, and the moves allowed; a state
    missing from `moves` is final."""

    def __init__(self, entity: str, states: type[S], initial: S, moves: Mapping[S, frozenset[S]]) -> None:
        self.entity, self.states, self.initial = entity, states, initial
        self.moves: dict[S, frozenset[S]] = {state: frozenset(moves.get(state, ())) for state in states}
        self.final = frozenset(state for state, targets in self.moves.items() if not targets)

    def allows(self, old: str, new: str) -> bool:
        return self.states(new) in self.moves[self.states(old)]

    def check(self, old: str, new: str) -> S:
        """`new` as a state, if a row in state `old` may move there; IllegalTransition otherwise."""
        if not self.allows(old, new):
            raise IllegalTransition(self.entity, str(old), str(new))
        return self.states(new)
