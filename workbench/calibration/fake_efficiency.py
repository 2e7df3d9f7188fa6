"""The kernel rates a fake-step roofline uses where the run itself traced no GPU step (a job that ran
out of memory before its trace): measured on committed one-GPU bf16 transformer training runs, not
the planner's unanchored defaults.

``python -m benchmarks.fake_step_efficiency`` measures them again from the runs in :data:`RUNS`
(workbench.calibration.calibrate over each run's traced kernels, pooled: FLOPs at the dense peak of
the run's dtype over the kernels' seconds). The matmul, attention and optimizer rates are those
runs'; the memory-bound share stays the planner's default (those runs' memory-bound kernels are
measured against the bytes the planner counts, not the bytes a fake step's ops move).
"""

from __future__ import annotations

from workbench.plan.efficiency import DEFAULT_MEMORY, Efficiencies

RUNS = ("traces/corpus/torchtitan_3b_none_gpu", "traces/corpus/torchtitan_3b_selective_gpu",
        "traces/corpus/torchtitan_3b_full_gpu", "traces/corpus/torchtitan_8b_full_gpu",
        "traces/corpus/torchtitan_8b_selective_gpu", "traces/corpus/torchtitan_qwen3_1p7b_gpu",
        "traces/corpus/torchtitan_qwen3_0p6b_gpu", "traces/recompute_1p3b_b16_none",
        "traces/recompute_1p3b_b16_selective", "traces/recompute_1p3b_b16_full")
"""torchtitan v0.2.2 (Llama 3.2 3B shape, Llama 3 8B, Qwen3 1.7B / 0.6B; none, op-level selective and
full recomputation) and the engine's ~1.3B GPT (none / selective / full), one H200 each, torch 2.11
+ CUDA 13, bf16 autocast, fused AdamW (traces/README.md)."""

CALIBRATED = Efficiencies(gemm=0.78, attention=0.47, memory_bound=DEFAULT_MEMORY, optimizer=0.55,
                          source="calibrated", runs=RUNS)

WORDS = (f"the run traced no GPU step: matmul / attention / optimizer rates measured on {len(RUNS)} committed "
         "one-H200 bf16 training runs (torchtitan 0.6B–8B, the engine's 1.3B GPT; "
         "benchmarks/fake_step_efficiency.py), memory-bound at the planner's default")

"""Pooled over :data:`RUNS` (the benchmark's last lines): matmuls 78.0 % of the dense peak (76–81 % by run),
fused attention 47.1 % (32–49 %), the optimizer 55.4 % of HBM bandwidth (54–57 %)."""

__all__ = ["CALIBRATED", "RUNS", "WORDS"]
