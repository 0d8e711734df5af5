#!/usr/bin/env bash
# The fourth call: the runner's warm-up now also makes the Triton built-ins' inputs on the meta device
# (workers.backends.triton_warm). The first compiles (bench/gpu/first_compile.py), the GPU tests of the warm-up,
# then screening against full measurement with the workers at the namespaces level as in the sixth series.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PARETUNE_WORKER_BWRAP=$PWD/.bwrap/bwrap
date -u +%Y-%m-%dT%H:%M:%SZ > $OUT/info.txt
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv >> $OUT/info.txt
timeout 150 taskset -c 0-15 python3 bench/gpu/first_compile.py $OUT/first_compile --rounds 2 --configs 5 > $OUT/first_compile.txt 2>&1
echo "first_compile exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
rm -f $OUT/first_compile/*_?.json
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/workers/test_triton_warm.py > $OUT/pytest.txt 2>&1
echo "pytest exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
mkdir -p /tmp/screen
timeout 320 taskset -c 0-15 python3 bench/gpu/screening_compare.py /tmp/screen/compare --deadline-s 300 --parallelism 4 --lease-ahead 3 --compilers 3 --rounds 2 --h2h-s 40
echo "screening_compare exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
cp /tmp/screen/compare/screening_compare.md $OUT/ 2>/dev/null
tar -C /tmp -czf $OUT/screen.tar.gz screen
