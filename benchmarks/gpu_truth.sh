#!/usr/bin/env bash
# Issue 16 on one GPU: what the capture costs, and self-timed public scripts under it.
#   bash benchmarks/gpu_truth.sh OUT [part]     (part: cost | corpus1 | corpus2 | all; needs corpus/:
#                                                 python benchmarks/corpus.py extract)
# On the device machine: carry ["corpus"], run from the repository root; OUT=$OUT.
set -uo pipefail
OUT=${1:?OUT}; PART=${2:-all}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
python -c "import torch; print('torch', torch.__version__, torch.version.cuda)" | tee -a "$OUT/gpu.txt"
python -c "import sys; sys.path.insert(0, 'benchmarks'); import corpus; corpus.prepare([corpus.BY_NAME['nanogpt_bf16_gpu']])"
NANO_TIMER='iter (\d+): loss [\d.]+, time ([\d.]+)ms'
if [[ $PART == cost || $PART == all ]]; then
  # 1. each capture option on nanoGPT's GPT-2 124M bf16 loop (eager), 5 recorded steps per run
  python benchmarks/capture_cost.py --cwd corpus/nanogpt --alone-as-rank --timer "$NANO_TIMER" --max-steps 30 \
      ${COST_ARGS:-} --json "$OUT/capture_cost_nanogpt.json" -- train.py --batch_size=12 --gradient_accumulation_steps=4 \
      --max_iters=40 --eval_iters=2 --log_interval=1 --always_save_checkpoint=False --compile=False 2>"$OUT/capture_cost_nanogpt.log"
  # 2. a loop of small ops on the GPU (host-bound)
  [[ -n ${SKIP_SMALL:-} ]] || python benchmarks/capture_cost.py --max-steps 40 --json "$OUT/capture_cost_small_gpu.json" \
      -- tests/scripts/self_timed.py --steps 60 --device cuda 2>"$OUT/capture_cost_small_gpu.log"
fi
if [[ $PART == corpus1 || $PART == all ]]; then
  python benchmarks/corpus.py run --kind gpu --out /tmp/corpus \
      --only nanogpt_bf16_gpu nanogpt_fp32_gpu nanogpt_bench_gpu
  python benchmarks/corpus.py pack /tmp/corpus "$OUT/corpus_truth1.tar.gz"
fi
if [[ $PART == corpus2 || $PART == all ]]; then
  python benchmarks/corpus.py run --kind gpu --out /tmp/corpus2 \
      --only nanogpt_compile_gpu imagenet_j1_gpu imagenet_j8_gpu timm_bench_train_gpu timm_bench_train_cl_gpu
  python benchmarks/corpus.py pack /tmp/corpus2 "$OUT/corpus_truth2.tar.gz"
fi
ls -la "$OUT"
