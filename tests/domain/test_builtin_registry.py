"""The registry of built-in kernels loads its GPU built-ins once, whichever thread asks first."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_threads_asking_while_the_gpu_builtins_import_all_find_them() -> None:
    """A worker's compilers look up their first trials' kernels at the same moment: every
    thread gets the GEMM, none a None because another thread had started the import. The
    import is slowed (0.3 s) so that the other threads ask while it runs; a fresh interpreter
    has not loaded the GPU built-ins yet."""
    script = textwrap.dedent("""
        import importlib, threading, time
        import wire.kernels as kernels

        real = importlib.import_module
        def slow(name, *args):
            if name == "wire.kernels.gpu":
                time.sleep(0.3)
            return real(name, *args)
        kernels.importlib.import_module = slow

        start = threading.Barrier(4)
        found = []
        def ask():
            start.wait()
            found.append(kernels.get_builtin("triton", "gemm_bf16") is not None)
        threads = [threading.Thread(target=ask) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(found)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[True, True, True, True]"
