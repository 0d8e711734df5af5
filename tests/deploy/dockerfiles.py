"""Dockerfiles as stages, read with Docker's own parser (the `dockerfile` package)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import dockerfile


@dataclass
class Stage:
    name: str
    base: str  # the FROM image, or the name of an earlier stage
    instructions: list[dockerfile.Command] = field(default_factory=list)

    def values(self, cmd: str) -> list[tuple[str, ...]]:
        return [c.value for c in self.instructions if c.cmd == cmd]

    def runs(self) -> list[str]:
        return [" ".join(value) for value in self.values("RUN")]


def stages(path: Path) -> dict[str, Stage]:
    found: dict[str, Stage] = {}
    current: Stage | None = None
    for command in dockerfile.parse_file(str(path)):
        if command.cmd == "FROM":
            value = command.value
            name = value[2] if len(value) == 3 and value[1].upper() == "AS" else f"stage-{len(found)}"
            current = found[name] = Stage(name, value[0])
        elif current is not None:
            current.instructions.append(command)
    return found


def chain(all_stages: dict[str, Stage], name: str) -> list[Stage]:
    """The stage and the stages it is built FROM, nearest first."""
    out = [all_stages[name]]
    while out[-1].base in all_stages:
        out.append(all_stages[out[-1].base])
    return out


def effective(all_stages: dict[str, Stage], name: str, cmd: str) -> tuple[str, ...] | None:
    """The value of the last `cmd` (USER, CMD, HEALTHCHECK, ...) in effect for a stage."""
    for stage in chain(all_stages, name):
        values = stage.values(cmd)
        if values:
            return values[-1]
    return None
