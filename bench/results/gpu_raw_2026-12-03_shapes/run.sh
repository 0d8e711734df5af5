#!/usr/bin/env bash
# Sweeps of attention_fwd on two more shapes and of RMSNorm on a second shape, for the
# leave-one-shape-out transfer replay (bench/replay_transfer.py --gpu). Compiles ahead on
# CPUs 2-15; one measuring process on CPUs 0-1. `run.sh rest` (and `rest2`, ...) goes on with
# the RMSNorm configurations the earlier calls left (--skip their files).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
PHASE="${1:-first}"
date -u +%Y-%m-%dT%H:%M:%SZ > $OUT/info-$PHASE.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv >> $OUT/info-$PHASE.txt
python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda)" >> $OUT/info-$PHASE.txt
ATT_A='[{"dims": {"batch": 16, "heads": 32, "seq": 512, "head_dim": 128, "causal": 1}, "weight": 1}]'
ATT_B='[{"dims": {"batch": 1, "heads": 32, "seq": 16384, "head_dim": 128, "causal": 1}, "weight": 1}]'
RMS='[{"dims": {"rows": 4096, "cols": 4096}, "weight": 1}]'
SKIP=()
[ "$PHASE" != first ] && SKIP=(--skip bench/results/gpu_raw_2026-12-03_shapes/sweep_rmsnorm_4096_*.json)
pids=()
for j in 0 1 2 3 4 5 6 7 8 9; do
  taskset -c 2-15 nice -n 5 python3 bench/gpu/sweep.py --kernel rmsnorm --backend cuda --cache /tmp/cache-rms \
    --out /dev/null --compile-only --shard $j/10 --workload "$RMS" --deadline-s 500 "${SKIP[@]}" > /tmp/compile-rms-$j.log 2>&1 &
  pids+=($!)
done
if [ "$PHASE" = first ]; then
  for name in A B; do
    var=ATT_$name
    for j in 0 1; do
      taskset -c 2-15 nice -n 5 python3 bench/gpu/sweep.py --kernel attention_fwd --cache /tmp/cache-att-$name --out /dev/null \
        --compile-only --shard $j/2 --workload "${!var}" --deadline-s 300 > /tmp/compile-att-$name-$j.log 2>&1 &
      pids+=($!)
    done
  done
  for name in A B; do
    var=ATT_$name
    echo "sweep attention $name: $(date -u +%H:%M:%S)" >> $OUT/info-$PHASE.txt
    taskset -c 0-1 python3 bench/gpu/sweep.py --kernel attention_fwd --cache /tmp/cache-att-$name \
      --out $OUT/sweep_attention_$name.json --workload "${!var}" --hot-window-s 0.2 --objectives runtime_ms,p99_ms \
      --deadline-s 80 > $OUT/sweep_attention_$name.log 2>&1
  done
fi
echo "sweep rmsnorm: $(date -u +%H:%M:%S)" >> $OUT/info-$PHASE.txt
taskset -c 0-1 python3 bench/gpu/sweep.py --kernel rmsnorm --backend cuda --cache /tmp/cache-rms \
  --out $OUT/sweep_rmsnorm_4096_$PHASE.json --workload "$RMS" --hot-window-s 0.1 --objectives runtime_ms,p99_ms \
  --deadline-s "${RMS_DEADLINE_S:-330}" "${SKIP[@]}" > $OUT/sweep_rmsnorm_$PHASE.log 2>&1
echo "done: $(date -u +%H:%M:%S)" >> $OUT/info-$PHASE.txt
kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null
tail -n 2 /tmp/compile-*.log >> $OUT/info-$PHASE.txt
