#!/usr/bin/env bash
# One shard of a kernel's sweep on one GPU, its compiles ahead of its measurements:
# COMPILERS processes fill the artifact cache on the compile CPUs (`sweep.py --compile-only`,
# each a slice of the shard) while one process measures the shard on the GPU, loading what
# they built. Configurations already in OUT_DIR's earlier files (`sweep-*.json`, a stopped
# run of the same shard) are skipped, so a shard can be swept over several calls.
#
#   CUDA_VISIBLE_DEVICES=1 bash bench/gpu/sweep_shard.sh rmsnorm cuda 1/4 OUT_DIR DEADLINE_S \
#       [COMPILERS=6] [MEASURE_CPUS=16-19] [COMPILE_CPUS=20-31] [OBJECTIVES=runtime_ms,energy_mj,p99_ms]
set -euo pipefail
kernel=$1 backend=$2 shard=$3 out=$4 deadline=$5
compilers=${6:-6} measure_cpus=${7:-0-3} compile_cpus=${8:-4-15}
objectives=${9:-runtime_ms,energy_mj,p99_ms}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
cache=${SWEEP_CACHE:-/tmp/paretune-sweep-cache-$kernel}
index=${shard%/*} count=${shard#*/}
earlier=("$out"/sweep-*.json)
[[ -e ${earlier[0]} ]] || earlier=()
run=$(date +%s)
pids=()
for ((j = 0; j < compilers; j++)); do
  taskset -c "$compile_cpus" nice -n 5 python3 "$here/sweep.py" --kernel "$kernel" --backend "$backend" \
    --cache "$cache" --out /dev/null --compile-only --shard "$((index + count * j))/$((count * compilers))" \
    --deadline-s "$deadline" --skip "${earlier[@]}" >"$out/compile-$j.log" 2>&1 &
  pids+=($!)
done
taskset -c "$measure_cpus" python3 "$here/sweep.py" --kernel "$kernel" --backend "$backend" --cache "$cache" \
  --out "$out/sweep-$run.json" --shard "$shard" --deadline-s "$deadline" --objectives "$objectives" \
  --skip "${earlier[@]}"
kill "${pids[@]}" 2>/dev/null || true
wait 2>/dev/null || true
