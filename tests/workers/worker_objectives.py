"""Python-backend objectives used by the worker tests (imported inside the sandbox)."""

from __future__ import annotations

import ctypes
import math
import os
import subprocess
import time
from typing import Any


def tradeoff(config: dict[str, Any]) -> dict[str, Any]:
    x = float(config["x"])
    return {
        "f1": x,
        "f2": 1.0 - math.sqrt(x),
        "runtime_ms": [1.0 + x, 1.1 + x, 0.9 + x],
        "power_w": {"value": 50.0 + x, "unit": "W"},
    }


def raises(config: dict[str, Any]) -> dict[str, Any]:
    raise ValueError(f"cannot evaluate {config}")


def segfault(config: dict[str, Any]) -> dict[str, Any]:
    print("about to read address 0", flush=True)
    ctypes.string_at(0)
    return {}


def hang_with_child(config: dict[str, Any]) -> dict[str, Any]:
    """Starts a grandchild that records its pid, then hangs: a timeout must kill both."""
    child = subprocess.Popen(["sleep", "1000"])
    with open(config["pid_file"], "w") as handle:
        handle.write(str(child.pid))
    while True:
        time.sleep(1)


def exits(config: dict[str, Any]) -> dict[str, Any]:
    os._exit(3)


def missing_metric(config: dict[str, Any]) -> dict[str, Any]:
    return {"something_else": 1.0}


def sleepy(config: dict[str, Any]) -> dict[str, Any]:
    """Sleeps; reports when it started and ended (wall-clock time)."""
    if config.get("pid_file"):
        with open(config["pid_file"], "w") as handle:
            handle.write(str(os.getpid()))
    start = time.time()
    time.sleep(float(config.get("sleep_s", 0.5)))
    end = time.time()
    return {"f1": end - start, "started": start, "ended": end}


def whoami(config: dict[str, Any]) -> dict[str, Any]:
    """The sandbox process's pid, an identity of the process (pids repeat: every sandbox
    with its own PID namespace is pid 2 there) and how many trials it ran before."""
    global _CALLS
    _CALLS += 1
    print(f"trial output {config.get('tag', '')}", flush=True)
    return {
        "pid": float(os.getpid()),
        "process": float(_PROCESS),
        "calls": float(_CALLS),
        "f1": float(config.get("x", 0.0)),
    }


_CALLS = 0
_PROCESS = int.from_bytes(os.urandom(6), "little")  # drawn once per interpreter


def leave_child(config: dict[str, Any]) -> dict[str, Any]:
    """Starts a background process, records its pid and returns: a warm runner must not
    carry it into the next trial."""
    child = subprocess.Popen(["sleep", "1000"])
    with open(config["pid_file"], "w") as handle:
        handle.write(str(child.pid))
    return {"f1": 1.0}


def visible_devices(config: dict[str, Any]) -> dict[str, Any]:
    return {"f1": float(os.environ.get("CUDA_VISIBLE_DEVICES", "-1"))}
