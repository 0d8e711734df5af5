"""Approved configurations at run time and build time, offline: load signed artifacts (a
directory, a file or a bundle), verify them, and apply the one whose target matches this
machine. Needs neither the service nor the network; triton, torch and pynvml only when
present. See docs/artifacts.md.
"""

from wire.targets import Match, select
from workers.runtime.bundle import EmbeddedKeyWarning, LoadedArtifact, read_artifacts, write_bundle, write_tar_bundle
from workers.runtime.detect import detect_target, parse_toolchain
from workers.runtime.store import ArtifactFallbackWarning, ArtifactStore, ArtifactToolchainWarning, Selection

__all__ = [
    "ArtifactFallbackWarning",
    "ArtifactStore",
    "ArtifactToolchainWarning",
    "EmbeddedKeyWarning",
    "LoadedArtifact",
    "Match",
    "Selection",
    "detect_target",
    "parse_toolchain",
    "read_artifacts",
    "select",
    "write_bundle",
    "write_tar_bundle",
]
