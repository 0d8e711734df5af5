#!/usr/bin/env bash
# Transfer against cold against triton.autotune at the new shape (bench/gpu/transfer_wall.py),
# three seeds, each seed's runs in a turned order.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u +%Y-%m-%dT%H:%M:%SZ > $OUT/info_wall.txt
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw,power.limit --format=csv >> $OUT/info_wall.txt
R=bench/results
taskset -c 0-15 python3 bench/gpu/transfer_wall.py $OUT/wall --sweep $R/gpu_raw_2026-12-03_wall/sweep_gemm_mlp.json \
  --related $R/gpu_raw_2026-11-29/sweep.json $R/gpu_raw_2026-12-02_transfer/sweep_gemm_decode.json \
  $R/gpu_raw_2026-12-02_transfer/sweep_gemm_prefill.json --seeds 3 --study-s 100 --deadline-s 520
echo "exit $?: $(date -u +%H:%M:%S)" >> $OUT/info_wall.txt
