#!/usr/bin/env bash
# Screening against full measurement (bench/gpu/screening_compare.py), as run 2 of
# gpu_raw_2026-12-03_screen, after the worker measures a promoted full stage before the screens
# it holds (workers.agent.loop.ReadyQueue). Everything the run writes comes back in one tarball.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u +%Y-%m-%dT%H:%M:%SZ > $OUT/info.txt
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv >> $OUT/info.txt
taskset -c 0-15 python3 bench/gpu/screening_compare.py /tmp/screen --deadline-s ${DEADLINE:-400} --parallelism 4 --lease-ahead 3 --compilers 3 --rounds ${ROUNDS:-3} --h2h-s ${H2H:-60}
echo "exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
cp /tmp/screen/screening_compare.md $OUT/ 2>/dev/null
tar -C /tmp -czf $OUT/screen.tar.gz screen
