#!/usr/bin/env bash
# `auto` is lfbo for every built-in over a finite space: the GPU tests, then attention and RMSNorm studies with
# `auto` through the whole stack (service, worker agent, warm runners), each with its repeats of the baseline.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PARETUNE_WORKER_BWRAP=$PWD/.bwrap/bwrap
date -u +%Y-%m-%dT%H:%M:%SZ > $OUT/info.txt
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv >> $OUT/info.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/workers/test_gpu_backends.py tests/workers/test_triton_warm.py > $OUT/pytest.txt 2>&1
echo "pytest exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
mkdir -p /tmp/auto
timeout 400 python3 bench/gpu/run_studies.py /tmp/auto/run --kernels attention,rmsnorm --trials 40 --repeats 3 --deadline-s 360 --h2h-s 30 --sampler '{"name": "auto", "seed": 2}' > /tmp/auto/console.txt 2>&1
echo "run_studies exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
cp /tmp/auto/console.txt $OUT/
tar -C /tmp -czf $OUT/auto.tar.gz auto
