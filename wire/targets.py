"""Which artifact applies here: the matching rules, pure.

1. Only artifacts of the kernel asked for (by name, and backend when given) are candidates.
2. The device must match: the same GPU model and compute capability (or, for the cpu
   backend, the same CPU model and architecture). A configuration tuned for another device
   is never applied; a device field unknown here matches nothing.
3. An exact match has every toolchain version the artifact records equal to the one here.
4. Otherwise the nearest: the same device with other toolchain versions, flagged with the
   differences. Nearest means the smallest weighted count of differing versions, where a
   compiler (triton, ptxas, nvrtc, cc: they decide the generated code) weighs 2 and the
   driver or its CUDA version 1, and a version unknown here counts as differing.
5. Ties go to the highest artifact version, then the latest approval.
No candidate with a matching device: no match (the caller falls back to its default).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from wire.artifact import ArtifactDocument
from wire.contract import Target

WEIGHTS = {"triton": 2, "ptxas": 2, "nvrtc": 2, "cc": 2, "driver": 1, "cuda": 1}


@dataclass(frozen=True)
class Match:
    document: ArtifactDocument
    exact: bool
    differences: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # field: (artifact's, here)
    others: int = 0  # further artifacts of this kernel that matched as well or less well

    def describe(self) -> str:
        doc = self.document
        what = f"{doc.kernel.name} v{doc.version} (validated on {_device_text(doc.target)})"
        if self.exact:
            return f"{what}: exact match"
        changes = ", ".join(
            f"{name} {ours} here {here or 'unknown'}" for name, (ours, here) in self.differences.items()
        )
        return f"{what}: same device, different toolchain ({changes})"


def _device_text(target: Target) -> str:
    return ", ".join(f"{k} {v}" for k, v in target.device().items() if v)


def device_matches(artifact: Target, here: Target) -> bool:
    wanted = artifact.device()
    return all(value is not None and getattr(here, name) == value for name, value in wanted.items())


def toolchain_differences(artifact: Target, here: Target) -> dict[str, tuple[str, str | None]]:
    return {
        name: (version, getattr(here, name))
        for name, version in artifact.toolchain().items()
        if getattr(here, name) != version
    }


def select(
    documents: Iterable[ArtifactDocument], kernel: str, here: Target, *, backend: str | None = None
) -> Match | None:
    """The artifact of `kernel` that applies on `here`, by the rules above."""
    ranked = []
    for doc in documents:
        if doc.kernel.name != kernel or (backend is not None and doc.kernel.backend != backend):
            continue
        if not device_matches(doc.target, here):
            continue
        differences = toolchain_differences(doc.target, here)
        distance = sum(WEIGHTS.get(name, 1) for name in differences)
        ranked.append(((distance, -doc.version, -doc.provenance.approved_at.timestamp()), doc, differences))
    if not ranked:
        return None
    ranked.sort(key=lambda item: item[0])
    _, best, differences = ranked[0]
    return Match(document=best, exact=not differences, differences=differences, others=len(ranked) - 1)


def release_of(version: str) -> str:
    """A CUDA version's release: "13.3.73" -> "13.3"."""
    return ".".join(version.split(".")[:2])


def parse_toolchain(text: str) -> dict[str, str]:
    """A toolchain as a user writes it: "triton=3.4.0,ptxas=13.0,driver=570.133.20"."""
    fields = dict.fromkeys(Target.TOOLCHAIN_FIELDS)
    result: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in re.split(r"[,;]", text or ""))):
        name, equals, value = part.partition("=")
        name = name.strip()
        if not equals or name not in fields or not value.strip():
            raise ValueError(
                f"toolchain item {part!r}: write name=version with name one of {', '.join(Target.TOOLCHAIN_FIELDS)}"
            )
        result[name] = value.strip()
    return result
