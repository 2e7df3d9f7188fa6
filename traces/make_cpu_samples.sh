#!/usr/bin/env bash
# Regenerate the engine's CPU sample runs in traces/ (2 gloo ranks each, ~6 s a run):
#   bash traces/make_cpu_samples.sh
set -euo pipefail
cd "$(dirname "$0")/.."
run() {  # name, config, --set overrides... (SCHEDULE and STEPS in the environment override 2,1,3 and 8)
  local name=$1 cfg=$2; shift 2
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  rm -rf "traces/$name"
  python -m workbench train --config "$cfg" --nproc-per-node 2 --profile --profile-memory --no-analyze --schedule "${SCHEDULE:-2,1,3}" \
      --out "traces/$name" --set train.steps="${STEPS:-8}" "${sets[@]}" > /dev/null
  echo "traces/$name: $(python -m workbench analyze --json "traces/$name" | python -c 'import json,sys; d=json.load(sys.stdin); print([(x["id"], x["severity"]) for x in d["diagnoses"]])')"
}
E=case_studies/engine
# healthy: the engine's defaults with workers, on a model big enough that compute dominates
run engine_healthy    $E/ddp_tiny.toml   model.preset='"small"' data.num_workers=2 data.persistent_workers=true
run engine_ddp        $E/ddp_tiny.toml   data.num_workers=2 data.persistent_workers=true
run engine_zero1      $E/ddp_tiny.toml   parallel.mode='"zero1"'
run engine_zero2      $E/zero3_tiny.toml parallel.mode='"zero2"'
run engine_zero3      $E/zero3_tiny.toml
run engine_tp         $E/tp_tiny.toml
run engine_pp_gpipe_m2  $E/pp_tiny.toml  parallel.pp_schedule='"gpipe"' parallel.microbatches=2
run engine_pp_1f1b_m8   $E/pp_tiny.toml  parallel.microbatches=8 data.batch_size=16
run fault_straggler   $E/ddp_tiny.toml   faults.straggler_rank=1 faults.straggler_ms=40
run fault_redundant_allgather $E/ddp_tiny.toml faults.redundant_allgather=true
run fault_slow_data   $E/ddp_tiny.toml   faults.slow_data=true
# the learning rate x1000 for optimizer step 4: the loss jumps ~3x from step 5 on
run fault_lr_spike    $E/ddp_tiny.toml   faults.lr_spike_step=4
# the learning rate x1e30 for optimizer step 4: the weights overflow, the loss is NaN from step 5 on
run fault_nan_loss    $E/ddp_tiny.toml   faults.lr_spike_step=4 faults.lr_spike_factor=1e30
# mixture of experts (8 experts, top-2, ep = 2 over all_to_all), the router balanced by the
# auxiliary-loss-free bias; its twin skewed on purpose (every token picks expert 0: max / mean load
# = 8 / 2 = 4, MaxVio 3). Steps 15-17 recorded, after 14 steps of balancing
MOE=(data.batch_size=8 train.lr=1e-4 model.moe_balance_coeff=0.002)
SCHEDULE=14,1,3 STEPS=20 run engine_moe_balanced $E/moe_tiny.toml "${MOE[@]}"
SCHEDULE=14,1,3 STEPS=20 run engine_moe_skewed   $E/moe_tiny.toml "${MOE[@]}" faults.skewed_routing=1.0
