#!/usr/bin/env bash
# The second call: the first compiles of a warm runner (bench/gpu/first_compile.py, now with each compile's steps
# timed and a job directory per configuration) and the GPU test of the glue, after fixes to both.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u +%Y-%m-%dT%H:%M:%SZ > $OUT/info.txt
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv >> $OUT/info.txt
timeout 400 taskset -c 0-15 python3 bench/gpu/first_compile.py $OUT/first_compile --rounds 3 --configs 5 > $OUT/first_compile.txt 2>&1
echo "first_compile exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/workers/test_triton_glue.py > $OUT/pytest.txt 2>&1
echo "pytest exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
