#!/usr/bin/env bash
# The GPU twins of the corpus's Hugging Face Trainer rows on today's families (benchmarks/corpus.py:
# hf_trainer_{qwen3_moe,deepseek_v3,olmoe,qwen3}_gpu and the eager-attention, accumulating,
# checkpointing hf_trainer_{qwen3,deepseek_v3}_eager_ac_gpu — 4x the CPU rows' widths, batch 8, bf16
# autocast): the Trainer's own script, unmodified, under `workbench profile` on one GPU. Not run yet:
# no GPU was lent when this was written.
#
# The model directories are built on the device (benchmarks/corpus_hf.py: the -small ones are
# 60-200 MB, more than a carry holds), each with the truth.json counted from the model object that
# was saved there; carry only the script (git-ignored corpus/):
#
#   run(command="bash benchmarks/gpu_corpus_hf.sh $OUT", carry=["corpus/transformers/tests"])
#
# Then, here: tar xzf corpus_hf_gpu.tar.gz -C runs/; python -m benchmarks.corpus check runs/corpus_hf;
# python -m benchmarks.corpus trim runs/corpus_hf traces/corpus; add the runs to
# tests/pipeline/test_corpus_models.py's runs (it picks up every committed run with a truth.json),
# traces/README.md and tests/plan/test_from_run_moe.py's TRAINER_RUNS; then
# `python -m benchmarks.model_inference` gives the MFU (bf16 peak) beside the fields. The Trainer prints
# no step time nor MFU before its end: hold the job's step and the workbench's MFU to the convention's
# FLOPs per token from truth.json x the steps CSV's tokens/s / 989 TFLOP/s (within 5 %), and
# `workbench plan --from-run RUN` to the run's step and memory (within 15 % for MoE, 10 % dense).
set -uo pipefail
OUT=${1:?OUT}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
python -c "import torch, transformers, accelerate; print('torch', torch.__version__, 'transformers', \
transformers.__version__, 'accelerate', accelerate.__version__)" >> "$OUT/gpu.txt" 2>&1
python -m benchmarks.corpus run --kind gpu --out /tmp/corpus_hf --only hf_trainer_qwen3_moe_gpu \
    hf_trainer_deepseek_v3_gpu hf_trainer_olmoe_gpu hf_trainer_qwen3_gpu hf_trainer_qwen3_eager_ac_gpu \
    hf_trainer_deepseek_v3_eager_ac_gpu
python -m benchmarks.corpus pack /tmp/corpus_hf "$OUT/corpus_hf_gpu.tar.gz"
