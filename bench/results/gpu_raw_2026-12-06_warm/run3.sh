#!/usr/bin/env bash
# The busy floor at 0.05 s: warm-ups of 0.02 to 0.2 s on a busy GPU and 0.1 s after an idle one
# (bench/gpu/warmup_floor.py), then screening against full measurement as in run.sh.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PARETUNE_WORKER_BWRAP=$PWD/.bwrap/bwrap
date -u +%Y-%m-%dT%H:%M:%SZ > $OUT/info.txt
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv >> $OUT/info.txt
timeout 200 taskset -c 0-3 python3 bench/gpu/warmup_floor.py $OUT/warmup_floor.json --configs 8 --rounds 4 --idle-s 2 \
  --ways busy:0.02,busy:0.05,busy:0.1,busy:0.2,idle:0.1 > $OUT/warmup_floor.txt 2>&1
echo "warmup_floor exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
mkdir -p /tmp/screen
timeout 400 taskset -c 0-15 python3 bench/gpu/screening_compare.py /tmp/screen/compare --deadline-s ${DEADLINE:-370} --parallelism 4 --lease-ahead 3 --compilers 3 --rounds 2 --h2h-s 40
echo "screening_compare exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
cp /tmp/screen/compare/screening_compare.md $OUT/ 2>/dev/null
tar -C /tmp -czf $OUT/screen.tar.gz screen
