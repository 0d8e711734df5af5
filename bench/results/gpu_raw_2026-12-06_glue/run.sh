#!/usr/bin/env bash
# The first compiles of a warm runner (bench/gpu/first_compile.py: the GPU warm-up alone against
# the Triton runner's warm-up with a first compile and its C glue kept), the GPU test of the glue,
# then screening against full measurement (bench/gpu/screening_compare.py) with the workers at the
# namespaces level (bubblewrap carried in .bwrap/ from bench/gpu/fetch_bwrap.sh) as in the sixth
# series. Everything the run writes comes back in one tarball.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PARETUNE_WORKER_BWRAP=$PWD/.bwrap/bwrap
date -u +%Y-%m-%dT%H:%M:%SZ > $OUT/info.txt
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv >> $OUT/info.txt
mkdir -p /tmp/screen
timeout 120 taskset -c 0-15 python3 bench/gpu/first_compile.py /tmp/screen/first_compile --rounds 2 --configs 5 \
  > /tmp/screen/first_compile.txt 2>&1
echo "first_compile exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/workers/test_triton_glue.py > /tmp/screen/pytest.txt 2>&1
echo "pytest exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
timeout 330 taskset -c 0-15 python3 bench/gpu/screening_compare.py /tmp/screen/compare --deadline-s ${DEADLINE:-310} --parallelism 4 --lease-ahead 3 --compilers 3 --rounds ${ROUNDS:-2} --h2h-s ${H2H:-40}
echo "screening_compare exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
cp /tmp/screen/first_compile.txt /tmp/screen/pytest.txt /tmp/screen/compare/screening_compare.md $OUT/ 2>/dev/null
grep -h "registered as worker" /tmp/screen/compare/logs.txt >> $OUT/info.txt 2>/dev/null
tar -C /tmp -czf $OUT/screen.tar.gz screen
