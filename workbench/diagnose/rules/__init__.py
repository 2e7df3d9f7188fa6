"""The rules, one module each: a function ``rule(ctx) -> Diagnosis | None`` registered with
``@rule(...)`` (workbench.diagnose.registry), its thresholds as named constants with their sources
in the module docstring, and the per-rank frames only it reads.

Importing a module registers its rule; the one list below is the order the rules run in (the
final sort by severity and gain keeps it for ties). Adding a rule is its module and one name here.
"""

from workbench.diagnose.rules import (  # noqa: F401  (imported to register)
    dataloader_stall,
    redundant_allgather,
    exposed_communication,
    oom_risk,
    memory_fragmentation,
    low_gpu_utilization,
    host_sync,
    pageable_memcpy,
    straggler_rank,
    mid_run_slowdown,
    expert_imbalance,
    pipeline_bubble,
    nonfinite_loss,
    training_instability,
    low_mfu,
    fp32_matmul,
    unfused_elementwise,
    unfused_optimizer,
    offload_optimizer_step,
    sharding_nothing,
    attention_math,
    layout_conversion,
    stale_gemm_kernels,
    out_of_memory,
    job_failed,
    collective_hang,
)
