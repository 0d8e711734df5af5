#!/usr/bin/env bash
# Screening against full measurement (bench/gpu/screening_compare.py), as gpu_raw_2026-12-06_warm/run6.sh: asked of an H200.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PARETUNE_WORKER_BWRAP=$PWD/.bwrap/bwrap
date -u +%Y-%m-%dT%H:%M:%SZ > $OUT/info.txt
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv >> $OUT/info.txt
mkdir -p /tmp/screen
timeout 300 taskset -c 0-15 python3 bench/gpu/screening_compare.py /tmp/screen/compare --deadline-s ${DEADLINE:-290} --parallelism 4 --lease-ahead 3 --compilers 3 --rounds 2 --h2h-s 30
echo "screening_compare exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
cp /tmp/screen/compare/screening_compare.md $OUT/ 2>/dev/null
tar -C /tmp -czf $OUT/screen.tar.gz screen
