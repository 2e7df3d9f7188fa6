#!/usr/bin/env bash
# On the GPU machine (one H200), from the source tree: the engine runs the planner's step-time and
# memory checks need beyond the committed ones (benchmarks/plan_gpu.py lists them).
#   bash benchmarks/plan_gpu.sh "$OUT"      # ~4 min; writes $OUT/plan_gpu.tgz and $OUT/plan_gpu.txt
# Then, here: tar -xzf plan_gpu.tgz -C traces/ && python -m benchmarks.plan_engine
set -uo pipefail
OUT=${1:?OUTDIR}
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/nvidia_smi.txt"
python3 -m benchmarks.plan_gpu run "$OUT"
ls -la "$OUT"
