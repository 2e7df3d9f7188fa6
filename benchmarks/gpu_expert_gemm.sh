#!/usr/bin/env bash
# Per-expert cost of a rank's routed-expert GEMMs on one GPU: torch._grouped_mm (one kernel, the
# planner's measured constants) against one cuBLAS matmul per expert over 4 streams (Transformer
# Engine's GroupedLinear path in BF16 on Hopper, what Megatron-Core runs), at Qwen3-235B-A22B's expert
# shapes, 1/4/16 local experts x 512/1024/4096 rows each. Torch only, about 2 minutes on one H100.
# Not run yet: written without a GPU.
#
#   bash benchmarks/gpu_expert_gemm.sh OUT
#
# Then, here: OUT/expert_gemm_loop.json; the slope of gpu_s (and host_s) against experts at equal
# FLOPs is the cost per expert and call of each path (moe_time.GROUPED_GEMM_OVERHEAD_S is the
# grouped kernel's, 0.93 us); a cuBLAS loop's, if far larger, is what Megatron-Core's TP 4 ModelZoo row lacks.
set -uo pipefail
OUT=${1:?OUT}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
timeout 400 python -m benchmarks.expert_gemm_loop --out "$OUT/expert_gemm_loop.json" 2>&1 | tee "$OUT/log.txt"
