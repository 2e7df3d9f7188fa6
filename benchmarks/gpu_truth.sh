#!/usr/bin/env bash
# The job's numbers on one GPU: what the capture costs, and self-timed public scripts under it.
#   bash benchmarks/gpu_truth.sh OUT PART...   PART: cost | nanogpt | imagenet | compile | timm
# needs corpus/ (python -m benchmarks.corpus extract); on the device machine carry ["corpus"] and
# run from the repository root with OUT=$OUT. Each part is time-boxed (PART_TIMEOUT_S, default
# 240) and packs what it made at once, so a call that runs out of time keeps the parts before.
set -uo pipefail
OUT=${1:?OUT}; shift
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$OUT/gpu.txt"
python -c "import torch; print('torch', torch.__version__, torch.version.cuda)" >> "$OUT/gpu.txt"
python -c "from benchmarks import corpus; corpus.prepare([corpus.BY_NAME['nanogpt_bf16_gpu']])"
NANO_TIMER='iter (\d+): loss [\d.]+, time ([\d.]+)ms'
NANO_ARGS="--batch_size=12 --gradient_accumulation_steps=4 --max_iters=40 --eval_iters=2 --log_interval=1 --always_save_checkpoint=False --compile=False"
T=${PART_TIMEOUT_S:-240}
corpus_part() {  # name, entries...
  local name=$1; shift
  timeout "$T" python -m benchmarks.corpus run --kind gpu --out "/tmp/corpus_$name" --only "$@"
  python -m benchmarks.corpus pack "/tmp/corpus_$name" "$OUT/corpus_$name.tar.gz"
}
for PART in "$@"; do
  echo "=== $PART $(date +%T)"
  case $PART in
    cost)  # each capture option on nanoGPT's GPT-2 124M bf16 loop (eager)
      timeout "$T" python -m benchmarks.capture_cost --cwd corpus/nanogpt --alone-as-rank --timer "$NANO_TIMER" \
          --max-steps 30 ${COST_ARGS:-} --json "$OUT/capture_cost_nanogpt.json" -- train.py $NANO_ARGS \
          2>"$OUT/capture_cost_nanogpt.log" ;;
    small)  # a loop of small ops on the GPU (host-bound)
      timeout "$T" python -m benchmarks.capture_cost --max-steps 40 --json "$OUT/capture_cost_small_gpu.json" \
          -- tests/scripts/self_timed.py --steps 60 --device cuda 2>"$OUT/capture_cost_small_gpu.log" ;;
    nanogpt) corpus_part nanogpt nanogpt_bf16_gpu nanogpt_fp32_gpu nanogpt_bench_gpu ;;
    imagenet) corpus_part imagenet imagenet_j1_gpu imagenet_j8_gpu ;;
    compile) corpus_part compile nanogpt_compile_gpu ;;
    timm) corpus_part timm timm_bench_train_gpu timm_bench_train_cl_gpu ;;
    *) echo "unknown part $PART" ;;
  esac
done
ls -la "$OUT"
