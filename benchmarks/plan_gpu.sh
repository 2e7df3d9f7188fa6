#!/usr/bin/env bash
# On the GPU machine (one H200), from the source tree: the engine runs the planner's step-time and
# memory checks need beyond the committed ones (issue 18, item 4): model size, batch,
# recomputation and dtype, each profiled; they come back as one tarball.
#   bash benchmarks/plan_gpu.sh "$OUT"                 # ~4 min; writes $OUT/plan_gpu.tgz, $OUT/plan_gpu.txt
# Then, here: tar -xzf plan_gpu.tgz -C traces/ && python benchmarks/plan_engine.py
# (the runs become traces/plan_gpu_*; tests/plan/test_engine_checks.py predicts every one of them
# from plan_gpu_370m_b16's calibration and holds it to the goals).
set -uo pipefail
OUT=${1:?OUTDIR}
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
RUNS=runs/plan
rm -rf "$RUNS" && mkdir -p "$RUNS"
DDP=case_studies/engine/gpt370m_ddp.toml
FSDP=case_studies/engine/gpt370m_fsdp.toml
run() {  # name, config, --set overrides...
  local name=$1 cfg=$2; shift 2
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  echo "=== $name $*"
  timeout 150 python3 -m workbench train --config "$cfg" --profile --no-analyze --schedule 6,2,2 \
      --out "$RUNS/$name" --set train.steps=20 "${sets[@]}" 2>&1 | grep -E "throughput|model |Error|error" | tail -3
}
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  run plan_gpu_370m_b16      $DDP                                   # the calibration run
  run plan_gpu_370m_b32      $DDP  data.batch_size=32               # batch
  run plan_gpu_370m_b16_ac   $DDP  train.activation_checkpointing=true   # recomputation
  run plan_gpu_370m_b32_ac   $DDP  data.batch_size=32 train.activation_checkpointing=true
  run plan_gpu_370m_b8_fp32  $DDP  data.batch_size=8 'parallel.mixed_precision="fp32"'   # dtype
  run plan_gpu_1p3b_b8       $DDP  model.d_model=2048 data.batch_size=8    # size: ~1.3B
  run plan_gpu_125m_b32      $DDP  'model.preset="125m"' data.batch_size=32 # size: 125M
  run plan_gpu_370m_b16_zero3 $FSDP                                 # FSDP2 (ZeRO-3)
} 2>&1 | tee "$OUT/plan_gpu.txt"
tar -czf "$OUT/plan_gpu.tgz" -C "$RUNS" .
ls -la "$OUT"
