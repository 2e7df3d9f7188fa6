#!/usr/bin/env bash
# On a machine of N GPUs (NCCL), from the source tree: the engine's mixture-of-experts block with
# expert parallelism over NCCL all-to-all (not yet run: only gloo has been available).
#   bash benchmarks/gpu_engine_moe.sh OUTDIR [N]
# 1. losses: one GPU (ep 1, batch N x 4) against N GPUs (ddp, ep = N, batch 4 each), fp32 so that
#    they must agree (the engine prints each step's loss and grad norm); the same with the skewed router
# 2. which expert path ran: torch._grouped_mm in bf16 on the GPU (the engine falls back to a loop
#    where it does not run), seen as aten::_grouped_mm in the trace
# 3. two profiled runs, balanced (model.moe_balance_coeff) and skewed (faults.skewed_routing=1.0),
#    tarred into OUTDIR: `workbench analyze` them here (expert_imbalance fires on the second only;
#    NCCL's all_to_allv is a record_param_comms event)
set -uo pipefail
OUT=${1:?OUTDIR}
N=${2:-$(nvidia-smi -L | wc -l)}
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
CFG=case_studies/engine/moe_tiny.toml
MODEL=(--set model.preset=small --set model.moe_experts=$((2 * N)) --set model.moe_top_k=2 --set train.steps=20)
losses() {  # name, extra args: the step lines only
  echo "=== $1"; shift
  timeout 200 python3 -m workbench train --config "$CFG" "${MODEL[@]}" "$@" 2>&1 | grep -E "^(step|model|throughput)|rror"
}
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  for skew in 0.0 1.0; do
    losses "single skew=$skew" --set parallel.mode=single --set parallel.ep=1 --set data.batch_size=$((4 * N)) \
        --set parallel.mixed_precision=fp32 --set faults.skewed_routing=$skew
    losses "ep=$N skew=$skew" --nproc-per-node "$N" --set parallel.ep="$N" --set data.batch_size=4 \
        --set parallel.mixed_precision=fp32 --set faults.skewed_routing=$skew
  done
  losses "ep=$N bf16 throughput" --nproc-per-node "$N" --set parallel.ep="$N" --set data.batch_size=16
  losses "ep=$N bf16 loop experts" --nproc-per-node "$N" --set parallel.ep="$N" --set data.batch_size=16 \
      --set model.moe_grouped_mm=false
} 2>&1 | tee "$OUT/moe_losses.txt"
for run in balanced skewed; do
  extra=(--set model.moe_balance_coeff=0.002)
  [ "$run" = skewed ] && extra+=(--set faults.skewed_routing=1.0)
  timeout 300 python3 -m workbench train --config "$CFG" "${MODEL[@]}" --nproc-per-node "$N" --set parallel.ep="$N" \
      --set data.batch_size=16 "${extra[@]}" --profile --no-analyze --schedule 14,1,3 --out "runs/moe_$run" \
      2>&1 | grep -v USDT | tail -3
  tar -czf "$OUT/engine_moe_${run}_gpu.tgz" -C runs "moe_$run"
done
ls -la "$OUT"
