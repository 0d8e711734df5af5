#!/usr/bin/env bash
# A compile runner that builds a configuration again for a later job: the build must carry its binary and launcher.
# The GPU tests in one process (the order that showed it) with the fix, then the warm-runner test alone without it.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PARETUNE_WORKER_BWRAP=$PWD/.bwrap/bwrap
date -u +%Y-%m-%dT%H:%M:%SZ > $OUT/info.txt
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv >> $OUT/info.txt
echo "== with forget_compiled, tests/workers/test_gpu_backends.py then test_triton_warm.py in one process" > $OUT/pytest.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/workers/test_gpu_backends.py tests/workers/test_triton_warm.py >> $OUT/pytest.txt 2>&1
echo "exit $?" >> $OUT/pytest.txt
echo "== without it (forget_compiled made a no-op), test_triton_warm.py alone" >> $OUT/pytest.txt
sed -i 's/^    while jit is not None:/    while False:/' workers/backends/triton_kernel.py
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/workers/test_triton_warm.py >> $OUT/pytest.txt 2>&1
echo "exit $?" >> $OUT/pytest.txt
git checkout -q workers/backends/triton_kernel.py 2>/dev/null || sed -i 's/^    while False:/    while jit is not None:/' workers/backends/triton_kernel.py
