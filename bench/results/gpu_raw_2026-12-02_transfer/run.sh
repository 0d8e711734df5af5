#!/usr/bin/env bash
# GEMM sweeps on two new shapes (decode M=64, prefill M=8192) for the leave-one-shape-out
# transfer replay: compiles ahead on 12 CPUs, one measuring process on CPUs 0-1.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu-23/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
# TrialFailure lives in wire.failures now (the bench's import predates the move)
sed -i 's/^from workers.backends.base import TrialFailure/from wire.failures import TrialFailure/' bench/gpu/sweep.py
date -u +%Y-%m-%dT%H:%M:%SZ > $OUT/info.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv >> $OUT/info.txt
python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda)" >> $OUT/info.txt
declare -A SHAPES=([decode]='[{"dims": {"m": 64, "n": 8192, "k": 8192}, "weight": 1}]' [prefill]='[{"dims": {"m": 8192, "n": 4096, "k": 4096}, "weight": 1}]')
pids=()
for name in decode prefill; do
  for j in 0 1 2 3 4 5; do
    taskset -c 2-15 nice -n 5 python3 bench/gpu/sweep.py --kernel gemm_bf16 --cache /tmp/cache-$name --out /dev/null \
      --compile-only --shard $j/6 --workload "${SHAPES[$name]}" --deadline-s 400 > /tmp/compile-$name-$j.log 2>&1 &
    pids+=($!)
  done
done
for name in decode prefill; do
  echo "sweep $name: $(date -u +%H:%M:%S)" >> $OUT/info.txt
  taskset -c 0-1 python3 bench/gpu/sweep.py --kernel gemm_bf16 --cache /tmp/cache-$name --out $OUT/sweep_gemm_$name.json \
    --workload "${SHAPES[$name]}" --hot-window-s 0.3 --objectives runtime_ms,p99_ms --deadline-s 215 > $OUT/sweep_$name.log 2>&1
  echo "done $name: $(date -u +%H:%M:%S)" >> $OUT/info.txt
done
kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null
tail -n 3 /tmp/compile-*.log >> $OUT/info.txt
