#!/usr/bin/env bash
# Screening against full measurement (bench/gpu/screening_compare.py) with the settings of the
# 2026-12-01 call 4, after screens that report before a study's first front wait for it
# (run 2: DEADLINE=330 ROUNDS=3 H2H=60, after the GPU built-ins load once whichever compiler asks first).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u +%Y-%m-%dT%H:%M:%SZ > $OUT/info.txt
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv >> $OUT/info.txt
taskset -c 0-15 python3 bench/gpu/screening_compare.py $OUT/screen --deadline-s ${DEADLINE:-370} --parallelism 4 --lease-ahead 3 --compilers 3 --rounds ${ROUNDS:-5} --h2h-s ${H2H:-80}
echo "exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
