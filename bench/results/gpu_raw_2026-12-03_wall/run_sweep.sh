#!/usr/bin/env bash
# The GEMM swept at a shape no earlier study tuned (M=2048, N=14336, K=4096: a 2048-token
# prefill chunk through an MLP up-projection), as the reference for bench/gpu/transfer_wall.py:
# compiles ahead on 12 CPUs, one measuring process on CPUs 0-1, as the decode and prefill sweeps
# (gpu_raw_2026-12-02_transfer/run.sh); then Triton's autotune once, to check its script.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u +%Y-%m-%dT%H:%M:%SZ > $OUT/info.txt
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv >> $OUT/info.txt
python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda)" >> $OUT/info.txt
SHAPE='[{"dims": {"m": 2048, "n": 14336, "k": 4096}, "weight": 1}]'
pids=()
for j in 0 1 2 3 4 5; do
  taskset -c 2-15 nice -n 5 python3 bench/gpu/sweep.py --kernel gemm_bf16 --cache /tmp/cache-mlp --out /dev/null \
    --compile-only --shard $j/6 --workload "$SHAPE" --deadline-s 300 > /tmp/compile-$j.log 2>&1 &
  pids+=($!)
done
echo "sweep: $(date -u +%H:%M:%S)" >> $OUT/info.txt
taskset -c 0-1 python3 bench/gpu/sweep.py --kernel gemm_bf16 --cache /tmp/cache-mlp --out $OUT/sweep_gemm_mlp.json \
  --workload "$SHAPE" --hot-window-s 0.3 --objectives runtime_ms,p99_ms --deadline-s 330 > $OUT/sweep_mlp.log 2>&1
echo "done: $(date -u +%H:%M:%S)" >> $OUT/info.txt
kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null
tail -n 3 /tmp/compile-*.log >> $OUT/info.txt
TRITON_CACHE_DIR=/tmp/triton-autotune-check timeout 120 python3 bench/gpu/autotune_gemm.py \
  --dims '{"m": 2048, "n": 14336, "k": 4096}' --out $OUT/autotune_check.json > $OUT/autotune_check.log 2>&1
echo "autotune exit $?: $(date -u +%H:%M:%S)" >> $OUT/info.txt
