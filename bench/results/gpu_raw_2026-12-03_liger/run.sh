#!/usr/bin/env bash
# Liger-Kernel's RMSNorm and SwiGLU through the service and one worker on the H200
# (bench/gpu/liger.py), the worker at the namespaces level where the carried bubblewrap
# (bench/gpu/fetch_bwrap.sh) works. Carries .whl (bench/gpu/fetch_wheels.sh plus
# liger-kernel 0.8.5), .bwrap and .gpu-24/AzureLLMInferenceTrace_code.csv
# (Azure/AzurePublicDataset data/, sha256 54e9a6d2a4bd06ba...).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u +%Y-%m-%dT%H:%M:%SZ > $OUT/info.txt
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv >> $OUT/info.txt
python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda)" >> $OUT/info.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,temperature.gpu,power.draw,utilization.gpu --format=csv -l 2 > $OUT/gpu.csv 2>&1 &
smi=$!
timeout "${LIGER_TIMEOUT_S:-540}" python3 bench/gpu/liger.py $OUT/liger --trace .gpu-24/AzureLLMInferenceTrace_code.csv \
  --study-timeout-s 300 --validation-timeout-s 150 --bwrap .bwrap/bwrap > $OUT/console.txt 2>&1
echo "exit $? at $(date -u +%H:%M:%S)" >> $OUT/info.txt
kill $smi 2>/dev/null
tar czf $OUT/liger_raw.tgz -C / $(cd / && ls -d tmp/paretune-liger-*/*.log 2>/dev/null) -C $OUT liger 2>/dev/null
rm -rf $OUT/liger
