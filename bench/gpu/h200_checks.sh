#!/usr/bin/env bash
# The H200 measurements still owed to the search-and-measurement targets, packed for two
# calls of at most ten minutes on a two-GPU machine (nvidia-h200-x2), each leaving one
# archive, $OUT/h200_checks_<part>.tgz, with every console, log and JSON.
#
#   part 1: GPU 0  screening against full measurement (bench/gpu/screening_compare.py,
#                  parallelism 4, the worker leasing two ahead), then RMSNorm sweep shard 0/4;
#           GPU 1  energy against the 20 s reference, three rounds, trial warm-ups 0.1 s and
#                  1.0 s (bench/gpu/energy_reference.py), then RMSNorm sweep shard 1/4.
#   part 2: GPU 0  RMSNorm shards 0/4 (what part 1 left) then 2/4;
#           GPU 1  RMSNorm shards 1/4 (what part 1 left) then 3/4.
#           Carry part 1's archive unpacked under .h200/ (here: `echo /.h200/ >>
#           .git/info/exclude; mkdir .h200; tar xzf h200_checks_1.tgz -C .h200`, then name
#           .h200 in the call's carry) so that the shards go on where they stopped
#           (sweep_shard.sh skips what earlier files hold).
#   part 3: GPU 0  RMSNorm shard 2/4 (what part 2 left), then the RMSNorm energy reference with
#                  trial warm-ups 1, 2 and 3 s;
#           GPU 1  RMSNorm shard 3/4 (what part 2 left). Carry part 2's archive as .h200.
#
# On the GPU machine, from the repository root, with the wheels of bench/gpu/fetch_wheels.sh:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site && bash bench/gpu/h200_checks.sh 1
set -uo pipefail
part=${1:?part 1, 2 or 3}
out=${OUT:?OUT must name the folder that comes back}
budget=${BUDGET_S:-540}  # seconds from now until everything has stopped
here=$(cd "$(dirname "$0")" && pwd)
start=$(date +%s)
left() { echo $((start + budget - $(date +%s))); }
export PYTHONUNBUFFERED=1
work=$(mktemp -d)
nvidia-smi --query-gpu=index,name,power.limit,driver_version,uuid --format=csv >"$work/gpus.csv" 2>&1
earlier=${EARLIER:-.h200}  # part 1's results, unpacked
for shard in 0 1 2 3; do
  mkdir -p "$work/rms$shard"
  cp "$earlier"/rms"$shard"/sweep-*.json "$work/rms$shard/" 2>/dev/null || true
done
shard_run() {  # gpu shard measure-cpus compile-cpus
  CUDA_VISIBLE_DEVICES=$1 bash "$here/sweep_shard.sh" rmsnorm cuda "$2/4" "$work/rms$2" "$(left)" 6 "$3" "$4" \
    >>"$work/rms$2/console.txt" 2>&1
}
if [[ $part == 1 ]]; then
  (
    CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 python3 "$here/screening_compare.py" "$work/screen" \
      --deadline-s 330 --parallelism 4 --lease-ahead 2 >"$work/screen.txt" 2>&1
    shard_run 0 0 0-3 4-15
  ) &
  (
    mkdir -p "$work/energy"
    CUDA_VISIBLE_DEVICES=1 taskset -c 16-19 python3 "$here/energy_reference.py" --trial-warmups 0.1,1.0 \
      --out "$work/energy/energy_reference.json" >"$work/energy/console.txt" 2>&1
    shard_run 1 1 16-19 20-31
  ) &
elif [[ $part == 2 ]]; then
  (shard_run 0 0 0-3 4-15; shard_run 0 2 0-3 4-15) &
  (shard_run 1 1 16-19 20-31; shard_run 1 3 16-19 20-31) &
else
  (
    shard_run 0 2 0-3 4-15
    mkdir -p "$work/energy"
    CUDA_VISIBLE_DEVICES=0 timeout "$(left)" taskset -c 0-3 python3 "$here/energy_reference.py" --kernels rmsnorm \
      --trial-warmups 1.0,2.0,3.0 --out "$work/energy/energy_reference.json" >"$work/energy/console.txt" 2>&1
  ) &
  (shard_run 1 3 16-19 20-31) &
fi
wait
tar czf "$out/h200_checks_$part.tgz" -C "$work" .
echo "part $part done in $(($(date +%s) - start)) s"
tail -n 30 "$work/screen.txt" "$work/energy/console.txt" 2>/dev/null
for shard in 0 1 2 3; do tail -n 2 "$work/rms$shard/console.txt" 2>/dev/null || true; done
