#!/usr/bin/env bash
# The model behind a trace on one GPU: a Llama-shaped trainer (tests/scripts/llama_trainer.py) with
# recomputation none / selective / full, FSDP2 or not, torchtitan-style or Hugging Face's Llama,
# each under `workbench profile`; every run directory (with the script's own log) packed into
# OUT/<name>.tar.gz. On the device machine: bash benchmarks/gpu_model.sh $OUT
# Unpacked, they are tests/analysis/data/llama_gpu_* (one H200, torch 2.11, transformers 5.17,
# 2026-12-04), held to the trainer's own print by tests/analysis/test_llama_gpu.py; the CPU twins of
# the titan runs are tests/analysis/data/llama_cpu_* (--device cpu).
set -uo pipefail
OUT=${1:?OUT}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$OUT" /tmp/model_runs
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
python -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" >> "$OUT/gpu.txt" 2>&1
SHAPE="--dim 2048 --layers 8 --heads 16 --kv-heads 4 --ffn 5632 --vocab 32000 --seq 2048 --batch 4 --steps 20"
run() {  # name, trainer args...
  local name=$1; shift
  local dir=/tmp/model_runs/$name
  echo "=== $name $(date +%T)"
  timeout 240 python -m workbench profile --no-analyze --schedule 8,2,2 --out "$dir" \
      tests/scripts/llama_trainer.py $SHAPE "$@" > /tmp/model_runs/$name.log 2>&1
  echo "exit $?"; tail -3 /tmp/model_runs/$name.log
  cp /tmp/model_runs/$name.log "$dir/console.log"
  tar czf "$OUT/$name.tar.gz" -C /tmp/model_runs "$name"
}
run llama_gpu_fsdp_full --impl titan --fsdp --ac full
run llama_gpu_fsdp_none --impl titan --fsdp --ac none
run llama_gpu_sel_accum2 --impl titan --ac selective --accum 2
run llama_gpu_hf_full --impl hf --ac full
run llama_gpu_hf_none --impl hf --ac none
ls -la "$OUT"
