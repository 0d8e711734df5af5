#!/usr/bin/env bash
# The warm-up floor kept after an idle gap only (gpu_harness.GpuActivity), the screen's own warm-up 0.02 s: the GPU
# test of the floor, the paired check of the short warm-up (bench/gpu/warmup_floor.py), then screening against full
# measurement as in run.sh.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PARETUNE_WORKER_BWRAP=$PWD/.bwrap/bwrap
date -u +%Y-%m-%dT%H:%M:%SZ > $OUT/info.txt
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv >> $OUT/info.txt
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/workers/test_gpu_backends.py > $OUT/pytest.txt 2>&1
echo "pytest exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
timeout 200 taskset -c 0-3 python3 bench/gpu/warmup_floor.py $OUT/warmup_floor.json --configs 8 --rounds 3 --idle-s 3 > $OUT/warmup_floor.txt 2>&1
echo "warmup_floor exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
mkdir -p /tmp/screen
timeout 400 taskset -c 0-15 python3 bench/gpu/screening_compare.py /tmp/screen/compare --deadline-s ${DEADLINE:-370} --parallelism 4 --lease-ahead 3 --compilers 3 --rounds 2 --h2h-s 40
echo "screening_compare exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
cp /tmp/screen/compare/screening_compare.md $OUT/ 2>/dev/null
tar -C /tmp -czf $OUT/screen.tar.gz screen
