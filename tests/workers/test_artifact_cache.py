"""The compiled-artifact cache: atomic commits, lookups, concurrent builders, pruning."""

from __future__ import annotations

import os
import threading
import time

import pytest
from conftest import PLANTED, cpu_source_kernel, make_spec

from workers.backends.base import CompiledKernel
from workers.backends.cpu import CpuBackend
from workers.cache import ArtifactCache
from workers.sandbox.context import Context
from workers.sandbox.stages import compile_trial

KEY = "ab" + "0" * 62


def _build(cache: ArtifactCache, payload: bytes = b"lib") -> CompiledKernel:
    staging = cache.staging()
    (staging / "kernel.so").write_bytes(payload)
    return CompiledKernel(staging, {"library": "kernel.so"}, {"compile_s": 0.5}, "warning: x")


def test_commit_then_lookup(cache):
    assert cache.lookup(KEY) is None
    committed = cache.commit(KEY, _build(cache))
    assert committed.directory == cache.path_for(KEY)
    found = cache.lookup(KEY)
    assert found is not None
    assert found.files == {"library": "kernel.so"}
    assert found.report["compile_s"] == 0.5 and found.log == "warning: x"
    assert (found.directory / "kernel.so").read_bytes() == b"lib"
    assert not list((cache.root / "staging").iterdir())


def test_second_commit_of_a_key_keeps_the_first(cache):
    cache.commit(KEY, _build(cache, b"first"))
    again = cache.commit(KEY, _build(cache, b"second"))
    assert (again.directory / "kernel.so").read_bytes() == b"first"
    assert len(cache.entries()) == 1


def test_concurrent_commits_of_one_key(cache):
    builds = [_build(cache, str(i).encode()) for i in range(8)]
    results: list[CompiledKernel] = []
    threads = [threading.Thread(target=lambda b=b: results.append(cache.commit(KEY, b))) for b in builds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r.directory for r in results}) == 1
    assert len(cache.entries()) == 1


def test_incomplete_entry_is_a_miss(cache):
    committed = cache.commit(KEY, _build(cache))
    os.remove(committed.directory / "kernel.so")
    assert cache.lookup(KEY) is None


def test_unsafe_keys_are_refused(cache):
    for key in ("../../etc", "a/b" * 5, ""):
        with pytest.raises(ValueError):
            cache.path_for(key)


def test_prune_drops_least_recently_used(cache):
    keys = [f"{i:02x}" + "f" * 62 for i in range(4)]
    for i, key in enumerate(keys):
        cache.commit(key, _build(cache, b"x" * 1000))
        os.utime(cache.path_for(key), (time.time() - 100 + i, time.time() - 100 + i))
    cache.lookup(keys[0])  # used now: the newest
    removed = cache.prune(max_bytes=2500)
    assert removed >= 2
    assert cache.lookup(keys[0]) is not None
    assert cache.lookup(keys[1]) is None


def test_compile_is_cached_by_source_flags_and_compiler(cache):
    kernel = cpu_source_kernel(PLANTED["good"])
    first = compile_trial(make_spec(kernel, {"opt": "-O2"}), Context(cache))
    again = compile_trial(make_spec(kernel, {"opt": "-O2"}), Context(cache))
    other = compile_trial(make_spec(kernel, {"opt": "-O3"}), Context(cache))
    assert not first.cached and again.cached and not other.cached
    assert first.key == again.key != other.key
    backend = CpuBackend()
    changed_source = cpu_source_kernel(PLANTED["good"] + "\n/* edit */\n")
    assert backend.cache_key(changed_source, {"opt": "-O2"}) != first.key
    # the compiler's version is part of the identity
    backend.__dict__["compiler_version"] = "cc 99.0"
    assert backend.cache_key(kernel, {"opt": "-O2"}) != first.key
