#!/usr/bin/env bash
# On the GPU machine (one H200), from the source tree: the engine benchmark and the
# case study's GPU ladder. Logs and run directories (tarred) land in OUTDIR.
#   bash benchmarks/gpu_engine.sh OUTDIR
set -uo pipefail
OUT=${1:?OUTDIR}
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
bench() {  # name, config, extra --set args
  local name=$1 cfg=$2; shift 2
  echo "=== $name"
  timeout 110 python3 -m workbench train --config "$cfg" "$@" 2>&1 | grep -v USDT | tail -6
}
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  bench ddp_370m case_studies/engine/gpt370m_ddp.toml
  bench fsdp2_370m case_studies/engine/gpt370m_fsdp.toml
} 2>&1 | tee "$OUT/engine_bench.txt"
timeout 330 python3 case_studies/utilisation_30_to_85/ladder.py --scale gpu --out runs/case \
    --sample-cost-ms "${SAMPLE_COST_MS:-120}" --json "$OUT/results_gpu.json" 2>&1 | grep -v USDT | tee "$OUT/ladder.txt" | grep -E "^==|calibration|Error|error|Traceback" 
for d in runs/case/*/; do n=$(basename "$d"); tar -czf "$OUT/case_$n.tgz" -C runs/case "$n"; done
ls -la "$OUT"
