#!/usr/bin/env bash
# Jobs that do not fit one 80 GB H100, and the layout the workbench offers for them, measured: the
# device half of the out-of-memory check (docs/capture.md "The job's step measured without a GPU").
#
#   bash benchmarks/gpu_oom_fit.sh OUT [RUN...]
#   RUN (default: tt_none tt_full hf_oom hf_full tt_selective, in that order; ~8 minutes in all):
#     tt_none       torchtitan v0.2.2 Qwen3-4B, seq 8192, local batch 1, no recomputation: out of memory
#                   in its first forward, before any trace (the capture measures its layout and the
#                   alternatives under FakeTensorMode at the first forward, the job waits)
#     tt_selective  the same at torchtitan's default op-level selective recomputation: out of memory in
#                   step 2 (the alternatives measured at the first forward if predicted near the card's
#                   capacity, else after the failure)
#     tt_full       the alternative offered for both, full recomputation, run 12 steps: its allocator
#                   peak and step, measured
#     hf_oom        Hugging Face's Trainer (benchmarks/hf_trainer_oom.py: a Qwen3-1.7B shape, batch 4 x
#                   4096, bf16): out of memory in its first forward
#     hf_full       the alternative offered, the Trainer's gradient checkpointing, 12 steps, measured
#
# Inputs (git-ignored; made on a machine with internet by `bash benchmarks/torchtitan_prepare.sh`):
#   corpus/torchtitan (v0.2.2 source), corpus/torchtitan_data (c4_synth), .whl (datasets & co.)
# On the device, from the repository root:
#   run(command="bash benchmarks/gpu_oom_fit.sh $OUT", carry=[".whl", "corpus/torchtitan", "corpus/torchtitan_data"])
# Each run is packed into $OUT/oom_fit_<run>.tar.gz (its run directory, trace left out when over 16 MB);
# $OUT/summary.txt has each run's exit, torchtitan's step lines, the fake-tensor measurements (predicted
# peak per layout) and the steps' allocator peaks. Then, here:
#   python -m benchmarks.oom_fit OUT_DIR     # predicted vs measured, the acceptance's ratios
# The whole script keeps within OOM_FIT_BUDGET_S (default 480 s; a run cut at the budget gets 20 s more to
# stop, then it is packed: ~8.5 minutes at worst): a run that would start with less than 60 s left is
# skipped and said so. $OUT holds at most 7 files: env.txt, summary.txt and one pack per run.
set -uo pipefail
OUT=${1:?OUT}; shift
RUNS=("$@"); [ ${#RUNS[@]} -gt 0 ] || RUNS=(tt_none tt_full hf_oom hf_full tt_selective)
ROOT=$PWD
BUDGET_S=${OOM_FIT_BUDGET_S:-480}
mkdir -p "$OUT" /tmp/oomfit
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/env.txt" 2>&1

# The wheels these runs need (.whl may hold others' too): torchtitan's datasets/torchdata/tyro and
# theirs, workbench's msgspec; .whl/extra's fallbacks only where the image's own package is outside
# the range datasets 5.2.0 asks for (the image's versions are not all known here)
WHEELS=(); for w in datasets dill multiprocess torchdata tyro typeguard docstring_parser typing_extensions msgspec; do
  for f in .whl/$w-[0-9]*.whl; do [ -f "$f" ] && WHEELS+=("$f"); done; done
if [ ${#WHEELS[@]} -gt 0 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${WHEELS[@]}" \
    || echo "wheel install failed" | tee -a "$OUT/env.txt"
fi
needs() {  # package, op (lt|gt), version: true when the image's package is outside that bound
  python3 -c "import importlib.metadata as m, sys; from packaging.version import Version as V
v = V(m.version('$1')); sys.exit(0 if (v < V('$3') if '$2' == 'lt' else v > V('$3')) else 1)" 2>/dev/null
}
extra() { echo "installing carried $1 ($2)" | tee -a "$OUT/env.txt"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/extra/$1-*.whl; }
needs fsspec gt 2026.9.0 && extra fsspec "datasets 5.2.0 pins fsspec<=2026.9.0"
needs pyarrow lt 24.0.0 && extra datasets "datasets 5.2.0 needs pyarrow>=24: 4.8.5 needs >=21"
export PYTHONPATH=/tmp/site:$ROOT:$ROOT/corpus/torchtitan
export PYTHONUNBUFFERED=1 HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 HF_HOME=/tmp/hf TOKENIZERS_PARALLELISM=false
export PYTORCH_ALLOC_CONF=expandable_segments:True   # as torchtitan's run_train.sh sets it
python3 - >> "$OUT/env.txt" 2>&1 <<'EOF'
import importlib.metadata as m, torch
print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no cuda")
for p in ("transformers", "datasets", "torchdata", "tyro", "fsspec", "pyarrow", "msgspec", "typing_extensions"):
    try:
        print(p, m.version(p))
    except m.PackageNotFoundError:
        print(p, "MISSING")
EOF

TT=(--job.config_file torchtitan/models/llama3/train_configs/debug_model.toml --model.name qwen3 --model.flavor 4B
    --training.dataset c4_test --training.dataset_path ../torchtitan_data/c4_synth
    --training.local_batch_size 1 --training.seq_len 8192 --lr_scheduler.warmup_steps 2 --metrics.log_freq 1
    --metrics.disable_color_printing --metrics.no-enable-tensorboard --profiling.no-enable-profiling
    --compile.no-enable --checkpoint.no-enable --validation.no-enable)

run_one() {  # name, time cap (s), fake-step mode, fake-step budget (s), workdir, command...
  local name=$1 cap=$2 fake=$3 fbudget=$4 wd=$5; shift 5
  local dir=/tmp/oomfit/$name left=$((BUDGET_S - SECONDS))
  if [ "$left" -lt 60 ]; then echo "=== $name skipped: $left s of the budget left" | tee -a "$OUT/summary.txt"; return; fi
  local t=$(( cap < left ? cap : left ))
  rm -rf "$dir"
  echo "=== $name $(date -u +%T) (limit $t s, WORKBENCH_FAKE_STEP=$fake, budget $fbudget s): $*" | tee -a "$OUT/summary.txt"
  (cd "$wd" && WORKBENCH_FAKE_STEP=$fake WORKBENCH_FAKE_BUDGET_S=$fbudget timeout -s INT -k 20 "$t" \
      python3 -m workbench profile --no-analyze --nproc-per-node 1 --schedule 6,2,3 --out "$dir" "$@") \
      > "/tmp/oomfit/$name.console" 2>&1
  local code=$?
  mkdir -p "$dir" && cp "/tmp/oomfit/$name.console" "$dir/console.log"
  { grep -E "step: +[0-9]+ |truth:|'loss'|out of memory|fake-tensor|Traceback" "$dir/console.log" | head -30
    python3 - "$dir" <<'EOF'
import json, sys, csv
from pathlib import Path
d = Path(sys.argv[1])
f = d / "fake_step_rank0.json"
if f.exists():
    doc = json.loads(f.read_text())
    for m in doc["measurements"]:
        print(f"  fake {m['layout']:<24} {m.get('peak_bytes', 0) / 2**30:7.2f} GiB  {m.get('seconds', 0):6.1f} s  {m.get('error', '')}")
    for n in doc.get("notes", []):
        print("  note:", n)
s = d / "steps_rank0.csv"
if s.exists():
    rows = list(csv.DictReader(s.open()))
    alloc = [float(r["max_mem_allocated_bytes"]) for r in rows if r.get("max_mem_allocated_bytes")]
    res = [float(r["max_mem_reserved_bytes"]) for r in rows if r.get("max_mem_reserved_bytes")]
    gpu = [float(r["gpu_step_ms"]) for r in rows[3:] if r.get("gpu_step_ms") and r.get("profiler") == "off"]
    if alloc:
        print(f"  measured: {len(rows)} steps, allocated peak {max(alloc) / 2**30:.2f} GiB, reserved {max(res) / 2**30:.2f} GiB"
              + (f", unprofiled GPU step median {sorted(gpu)[len(gpu) // 2]:.1f} ms" if gpu else ""))
EOF
    echo "exit $code after $SECONDS s total"; } | tee -a "$OUT/summary.txt"
  tar -czf "$OUT/oom_fit_$name.tar.gz" -C /tmp/oomfit "$name"
  if [ "$(stat -c %s "$OUT/oom_fit_$name.tar.gz")" -gt 16000000 ]; then  # the device returns files <= 16 MiB
    tar -czf "$OUT/oom_fit_$name.tar.gz" -C /tmp/oomfit --exclude '*.pt.trace.json*' "$name"
    echo "$name: packed without its trace (over 16 MB)" | tee -a "$OUT/summary.txt"
  fi
}

for RUN in "${RUNS[@]}"; do
  case $RUN in
    tt_none)      run_one "$RUN" 200 auto 100 corpus/torchtitan torchtitan/train.py "${TT[@]}" --training.steps 12 \
                    --activation_checkpoint.mode none ;;
    tt_selective) run_one "$RUN" 200 auto 70 corpus/torchtitan torchtitan/train.py "${TT[@]}" --training.steps 12 \
                    --activation_checkpoint.mode selective --activation_checkpoint.selective_ac_option op ;;
    tt_full)      run_one "$RUN" 120 off 0 corpus/torchtitan torchtitan/train.py "${TT[@]}" --training.steps 14 \
                    --activation_checkpoint.mode full ;;
    hf_oom)       run_one "$RUN" 170 auto 80 "$ROOT" benchmarks/hf_trainer_oom.py --steps 12 ;;
    hf_full)      run_one "$RUN" 100 off 0 "$ROOT" benchmarks/hf_trainer_oom.py --steps 14 --gradient-checkpointing ;;
    *) echo "unknown run $RUN" | tee -a "$OUT/summary.txt" ;;
  esac
done
ls -la "$OUT"
