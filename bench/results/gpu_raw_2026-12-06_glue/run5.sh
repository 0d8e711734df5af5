#!/usr/bin/env bash
# The fifth call: the warm-up by phase (a run-phase runner against a compile runner), fresh processes, then the GPU
# tests of the warm-up.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u +%Y-%m-%dT%H:%M:%SZ > $OUT/info.txt
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv >> $OUT/info.txt
timeout 150 taskset -c 0-15 python3 bench/gpu/first_compile.py $OUT/first_compile --rounds 2 --configs 2 --modes run,runner > $OUT/first_compile.txt 2>&1
echo "first_compile exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
rm -f $OUT/first_compile/*_?.json
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/workers/test_triton_warm.py > $OUT/pytest.txt 2>&1
echo "pytest exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
