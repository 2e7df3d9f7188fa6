#!/usr/bin/env bash
# torchtitan (github pytorch/torchtitan at tag v0.2.2, 73a0e697) run unmodified under `workbench profile` on
# one GPU: Llama-3-shaped models with activation checkpointing none / selective (per-op) / full, each
# run directory keeping torchtitan's own log (its `step: N loss … memory … tps … tflops … mfu …%`
# lines: MFU = (6·N_non-embedding + 12·L·d·s) FLOP per token · tps / 989 TFLOP/s) as console.log.
#
#   bash benchmarks/torchtitan_gpu.sh OUT [RUN...]
#   RUN: 3b_full 3b_selective 3b_none 8b_full (the default, in this order) | 3b_selective2 | 1b_none
#        | 8b_none_oom 8b_selective: the out-of-memory check (python -m benchmarks.oom_check, once the
#        packs are back): 8B without recomputation at seq 8192 runs out of memory in its second step
#        (recorded from step 0, --schedule 0,0,2, with --memory-history), and the alternatives the
#        workbench offers for it (8b_full, 8b_selective) run and measured
#        | 1b_compiled 3b_compiled: Llama 3.2 1B / 3B compiled with max-autotune, a first step of minutes
#        | qwen3_0.6b qwen3_1.7b: torchtitan's Qwen3 dense flavors (tied embeddings, heads x head_dim !=
#        dim), 4 x 4096 tokens, no recomputation | qwen3_moe dsv3_16b: MoE flavors (wb_moe_flavors:
#        Qwen3-30B-A3B and DeepSeek 16B layers, 6 of them), 2 x 4096 tokens; torchtitan prints their
#        MFU from active parameters (models/utils.py get_moe_model_nparams_and_flops)
#        | gpt_oss_debug: gpt-oss's debug model (sinks, sliding window, compiled FlexAttention), 8 x 2048
#        | qwen3_moe_op dsv3_16b_op qwen3_1.7b_op: the MoE flavors and Qwen3 1.7B at torchtitan's op-level
#        selective recomputation (1 x 4096, 2 x 4096, 4 x 4096), for plan --from-run's held-out peaks
#
# On the device machine, from the repository root, with carry
#   [".whl", "corpus/torchtitan", "corpus/torchtitan_ext", "corpus/torchtitan_data"]
# (all git-ignored; made here by hand, see the report in the session that added this file):
#   corpus/torchtitan       torchtitan v0.2.2 source (`git archive v0.2.2`, less its test images/data)
#   corpus/torchtitan_ext   wb_llama3_flavors.py: the Llama 3.2 1B/3B shapes as llama3 flavors, loaded
#                           with torchtitan's own `--experimental.custom_import` (v0.2.2 has 8B/70B/405B)
#   corpus/torchtitan_data  c4_synth/data.json: generated text in the c4_test layout (the real c4_test
#                           blob is not in the mirror); tokenized by torchtitan's test tokenizer
#   .whl                    datasets 5.2.0, dill, multiprocess, torchdata, tyro, typeguard, docstring-parser
#                           (missing on that machine); .whl/extra/fsspec only if its fsspec is too new
# Each run is time-boxed (SIGINT first, so the capture keeps what it has) and packed at once into
# $OUT/torchtitan_<run>.tar.gz; $OUT/summary.txt has torchtitan's step lines of every run.
set -uo pipefail
OUT=${1:?OUT}; shift
RUNS=("$@"); [ ${#RUNS[@]} -gt 0 ] || RUNS=(3b_full 3b_selective 3b_none 8b_full)
ROOT=$PWD
BUDGET_S=${TT_BUDGET_S:-510}   # all runs together; the device allows 600 s per command
STEPS=${TT_STEPS:-20}
SCHEDULE=${TT_SCHEDULE:-6,2,3}  # workbench records optimizer steps 8-10 (0-based); 11-19 stay unprofiled
mkdir -p "$OUT" /tmp/tt
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
} > "$OUT/env.txt" 2>&1

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed" | tee -a "$OUT/env.txt"; exit 1; }
# Fallbacks in .whl/extra, each installed only when the machine's own package is outside the range
# that datasets 5.2.0 / typeguard 4.6 ask for (the image's versions are not all known here).
needs() {  # package, op (lt|gt), version: true when the installed package is outside that bound
  python3 -c "import importlib.metadata as m, sys; from packaging.version import Version as V
v = V(m.version('$1')); sys.exit(0 if (v < V('$3') if '$2' == 'lt' else v > V('$3')) else 1)" 2>/dev/null
}
extra() { echo "installing carried $1 ($2)" | tee -a "$OUT/env.txt"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/extra/$1-*.whl; }
needs fsspec gt 2026.9.0 && extra fsspec "datasets 5.2.0 pins fsspec<=2026.9.0"
needs typing_extensions lt 4.14.0 && extra typing_extensions "typeguard needs >=4.14"
needs pyarrow lt 24.0.0 && extra datasets "datasets 5.2.0 needs pyarrow>=24: 4.8.5 needs >=21"
export PYTHONPATH=/tmp/site:$ROOT:$ROOT/corpus/torchtitan:$ROOT/corpus/torchtitan_ext
export PYTHONUNBUFFERED=1 HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 HF_HOME=/tmp/hf TOKENIZERS_PARALLELISM=false
export PYTORCH_ALLOC_CONF=expandable_segments:True   # as torchtitan's run_train.sh sets it
python3 - >> "$OUT/env.txt" 2>&1 <<'EOF'
import importlib.metadata as m, torch
print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no cuda")
for p in ("datasets", "torchdata", "tyro", "fsspec", "pyarrow", "huggingface_hub", "tokenizers", "typing_extensions", "dill", "multiprocess"):
    try:
        print(p, m.version(p))
    except m.PackageNotFoundError:
        print(p, "MISSING")
import datasets, torchdata, tyro  # noqa: F401  (fail here, not in each run)
EOF

COMMON=(--job.config_file torchtitan/models/llama3/train_configs/debug_model.toml
        --experimental.custom_import wb_llama3_flavors
        --training.dataset c4_test --training.dataset_path ../torchtitan_data/c4_synth
        --training.local_batch_size 1 --training.seq_len 8192 --training.steps "$STEPS"
        --lr_scheduler.warmup_steps 2 --metrics.log_freq 1 --metrics.disable_color_printing
        --metrics.no-enable-tensorboard --profiling.no-enable-profiling --compile.no-enable
        --checkpoint.no-enable --validation.no-enable)

run_one() {  # name, time cap (s), torchtitan flags...
  local name=$1 cap=$2; shift 2
  local dir=/tmp/tt/$name left=$((BUDGET_S - SECONDS))
  if [ "$left" -lt 60 ]; then echo "=== $name skipped: $left s of the budget left" | tee -a "$OUT/summary.txt"; return; fi
  local t=$(( cap < left ? cap : left ))
  rm -rf "$dir" "/tmp/tt_dump/$name"
  echo "=== $name $(date -u +%T) (limit $t s): $*" | tee -a "$OUT/summary.txt"
  (cd corpus/torchtitan && timeout -s INT -k 20 "$t" python3 -m workbench profile --no-analyze --nproc-per-node 1 \
      --schedule "$SCHEDULE" ${WB_PROFILE_ARGS:-} --out "$dir" torchtitan/train.py "${COMMON[@]}" \
      --job.dump_folder "/tmp/tt_dump/$name" "$@") > "/tmp/tt/$name.console" 2>&1
  local code=$?
  mkdir -p "$dir" && cp "/tmp/tt/$name.console" "$dir/console.log"
  { grep -E "step: +[0-9]+ |Model .* size|Error|error:|out of memory|Traceback" "$dir/console.log" | head -40
    echo "exit $code after $SECONDS s total"; } | tee -a "$OUT/summary.txt"
  tar -czf "$OUT/torchtitan_$name.tar.gz" -C /tmp/tt "$name"
  if [ "$(stat -c %s "$OUT/torchtitan_$name.tar.gz")" -gt 16000000 ]; then  # the device returns files <= 16 MiB
    echo "$name: pack over 16 MB, packing it without the trace" | tee -a "$OUT/summary.txt"
    tar -czf "$OUT/torchtitan_$name.tar.gz" -C /tmp/tt --exclude '*.pt.trace.json*' "$name"
  fi
  ls -la "$OUT/torchtitan_$name.tar.gz" | tee -a "$OUT/summary.txt"
}

SEL=(--activation_checkpoint.mode selective --activation_checkpoint.selective_ac_option op)
for RUN in "${RUNS[@]}"; do
  case $RUN in
    3b_full)       run_one "$RUN" 120 --model.flavor 3B --activation_checkpoint.mode full ;;
    3b_selective)  run_one "$RUN" 120 --model.flavor 3B "${SEL[@]}" ;;
    3b_none)       run_one "$RUN" 120 --model.flavor 3B --activation_checkpoint.mode none ;;
    8b_full)       run_one "$RUN" 170 --model.flavor 8B --activation_checkpoint.mode full ;;
    # every 2nd block checkpointed whole (torchtitan's layer-frequency selective option)
    3b_selective2) run_one "$RUN" 120 --model.flavor 3B --activation_checkpoint.mode selective --activation_checkpoint.selective_ac_option 2 ;;
    1b_none)       run_one "$RUN" 90 --model.flavor 1B --activation_checkpoint.mode none ;;
    # runs out of memory in its second step on one H200 (PyTorch: ~138 GiB of 139.8 allocated)
    8b_none_oom)   SCHEDULE=0,0,2 WB_PROFILE_ARGS="--memory-history 100000" run_one "$RUN" 120 --model.flavor 8B \
                     --activation_checkpoint.mode none ;;
    8b_selective)  run_one "$RUN" 170 --model.flavor 8B "${SEL[@]}" ;;
    # a compiled job whose first step takes minutes (inductor's max-autotune benchmarks every matmul):
    # auto's step source must wait for it, and the steps analysed must be iterations
    1b_compiled|3b_compiled)
                   export TORCHINDUCTOR_MAX_AUTOTUNE=1
                   run_one "$RUN" 420 --model.flavor "$(echo ${RUN%_compiled} | tr b B)" --activation_checkpoint.mode none \
                     --compile.enable
                   unset TORCHINDUCTOR_MAX_AUTOTUNE ;;
    qwen3_0.6b|qwen3_1.7b)
                   run_one "$RUN" 90 --model.name qwen3 --model.flavor "$(echo ${RUN#qwen3_} | tr b B)" --activation_checkpoint.mode none \
                     --training.seq_len 4096 --training.local_batch_size 4 ;;
    qwen3_moe)     run_one "$RUN" 120 --model.name qwen3 --model.flavor 30B-A3B-6L --experimental.custom_import wb_moe_flavors \
                     --activation_checkpoint.mode none --training.seq_len 4096 --training.local_batch_size 2 ;;
    dsv3_16b)      run_one "$RUN" 120 --model.name deepseek_v3 --model.flavor 16B-6L --experimental.custom_import wb_moe_flavors \
                     --activation_checkpoint.mode none --training.seq_len 4096 --training.local_batch_size 2 ;;
    # torchtitan's gpt-oss debug model (attention sinks, sliding-window layers, FlexAttention compiled:
    # no aten attention op in the trace), its debug config's batch 8 x 2048
    gpt_oss_debug) run_one "$RUN" 100 --model.name gpt_oss --model.flavor debugmodel --activation_checkpoint.mode none \
                     --training.seq_len 2048 --training.local_batch_size 8 ;;
    # op-level selective recomputation (torchtitan's default selective option) on its MoE and tied dense
    # families: held-out peaks for plan --from-run (workbench/plan/recompute.py)
    qwen3_moe_op)  run_one "$RUN" 100 --model.name qwen3 --model.flavor 30B-A3B-6L --experimental.custom_import wb_moe_flavors \
                     "${SEL[@]}" --training.seq_len 4096 --training.local_batch_size 1 ;;
    dsv3_16b_op)   run_one "$RUN" 100 --model.name deepseek_v3 --model.flavor 16B-6L --experimental.custom_import wb_moe_flavors \
                     "${SEL[@]}" --training.seq_len 4096 --training.local_batch_size 2 ;;
    qwen3_1.7b_op) run_one "$RUN" 90 --model.name qwen3 --model.flavor 1.7B "${SEL[@]}" \
                     --training.seq_len 4096 --training.local_batch_size 4 ;;
    *) echo "unknown run $RUN" | tee -a "$OUT/summary.txt" ;;
  esac
done
ls -la "$OUT"
