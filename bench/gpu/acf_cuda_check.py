"""A CUDA C++ built-in (RMSNorm) with ACFs on the GPU: NVRTC compiles it to PTX and the
pinned toolchain's ptxas (PARETUNE_PTXAS, 13.3) assembles it with each ACF; every build is
checked against the reference and timed (runtime_ms), beside the build without an ACF.

    PARETUNE_PTXAS=/tmp/tc/bin/ptxas python3 bench/gpu/acf_cuda_check.py OUT.json --pack PACK.zip [--files 3]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from wire.contract import ControlsFile, ControlsParameter, KernelSpec, MeasureSettings  # noqa: E402
from wire.failures import TrialFailure  # noqa: E402
from workers.backends.cuda_backend import CudaBackend  # noqa: E402
from workers.compilers import controls  # noqa: E402

SHAPE = {"rows": 16384, "cols": 8192}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--pack", type=Path, required=True)
    parser.add_argument("--files", type=int, default=3)
    args = parser.parse_args()
    with zipfile.ZipFile(args.pack) as archive:
        contents = [archive.read(n) for n in archive.namelist() if n.endswith(".acf")][: args.files]
    files = [ControlsFile(sha256=hashlib.sha256(c).hexdigest(), content_base64=base64.b64encode(c).decode())
             for c in contents]
    kernel = KernelSpec(backend="cuda", builtin="rmsnorm", workload=[{"dims": SHAPE}],
                        controls={"acf": ControlsParameter(compiler="ptxas", version="13.3")})
    backend = CudaBackend()
    settings = MeasureSettings(warmup_s=0.1, hot_window_s=0.5, target_s=0.1)
    rows = []
    for value in ["none", *(f.sha256 for f in files)]:
        workdir = Path(tempfile.mkdtemp(prefix="rmsnorm-acf-"))
        controls.write(files, workdir)
        row: dict[str, object] = {"acf": value}
        try:
            built = backend.compile(kernel, {"acf": value}, workdir)
            row["variants"] = built.report["variants"]
            outcome = backend.check(kernel, {"acf": value}, built)
            row["correct"] = outcome.passed
            metrics, _ = backend.measure(kernel, {"acf": value}, built, ["runtime_ms"], settings)
            row["runtime_ms"] = metrics["runtime_ms"].value
        except TrialFailure as exc:
            row["failure"] = {"reason": exc.reason.value, "message": exc.message}
        rows.append(row)
        print(json.dumps(row, default=str)[:800], flush=True)
    args.out.write_text(json.dumps({"shape": SHAPE, "rows": rows}, indent=2, default=str))


if __name__ == "__main__":
    main()
