#!/usr/bin/env bash
# Mixtures of experts and today's dense shapes on one GPU: benchmarks/hf_train.py (Hugging Face
# transformers models built from configs, no download) under `workbench profile`, each run printing
# its own truth (parameters total/active, FLOPs per token by torchtitan's convention) and its own MFU
# per step against the H100/H200 bf16 peak (989 TFLOP/s); every run directory with the script's log as
# console.log, packed into OUT/<name>.tar.gz. Needs transformers >= 5 on the device machine (carry a
# wheel under .whl/ if it lacks one). Not run yet: no GPU was lent when this was written.
#
#   bash benchmarks/gpu_moe.sh OUT
#
# Then, here: unpack into traces/, `python -m benchmarks.model_inference` (the truth is in each
# console.log) and hold MFU to the script's own print (within 5 %), as tests/analysis/test_llama_gpu.py
# does for the dense runs. What the GPU adds over the CPU runs: grouped GEMM kernels launched by
# aten::_grouped_mm (efficiency.moe from kernels), bf16 autocast, the job's step on the GPU's clock.
set -uo pipefail
OUT=${1:?OUT}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
[ -d .whl ] && python -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH
mkdir -p "$OUT" /tmp/moe_runs
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
python -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" >> "$OUT/gpu.txt" 2>&1
SHAPE="--device cuda --bf16 --width 8 --layers 8 --vocab 32000 --seq 1024 --batch 4 --steps 20 --peak-tflops 989"
run() {  # name, hf_train args...
  local name=$1; shift
  local dir=/tmp/moe_runs/$name
  echo "=== $name $(date +%T)"
  timeout 150 python -m workbench profile --no-analyze --schedule 8,2,2 --out "$dir" benchmarks/hf_train.py $SHAPE "$@" \
      > /tmp/moe_runs/$name.log 2>&1
  echo "exit $?"; tail -2 /tmp/moe_runs/$name.log
  grep -E "^(step|truth)" /tmp/moe_runs/$name.log > "$dir/console.log"
  tar czf "$OUT/$name.tar.gz" -C /tmp/moe_runs "$name"
}
run moe_qwen3_gpu --family qwen3_moe
run moe_mixtral_gpu --family mixtral
run moe_deepseek_v3_gpu --family deepseek_v3
run moe_qwen3_eager_gpu --family qwen3_moe --experts-impl eager
run dense_qwen3_gpu --family qwen3
