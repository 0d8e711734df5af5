#!/usr/bin/env bash
# Screening against full measurement (bench/gpu/screening_compare.py) with the workers at the
# namespaces level (bubblewrap carried in .bwrap/ from bench/gpu/fetch_bwrap.sh), where a worker
# keeps spare warm runners for the next new study. Everything the run writes comes back in one tarball.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PARETUNE_WORKER_BWRAP=$PWD/.bwrap/bwrap
date -u +%Y-%m-%dT%H:%M:%SZ > $OUT/info.txt
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv >> $OUT/info.txt
timeout 330 taskset -c 0-15 python3 bench/gpu/screening_compare.py /tmp/screen --deadline-s ${DEADLINE:-310} --parallelism 4 --lease-ahead 3 --compilers 3 --rounds ${ROUNDS:-2} --h2h-s ${H2H:-40}
echo "exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
cp /tmp/screen/screening_compare.md $OUT/ 2>/dev/null
grep -h "registered as worker" /tmp/screen/logs.txt >> $OUT/info.txt 2>/dev/null
tar -C /tmp -czf $OUT/screen.tar.gz screen
