"""What each release added to ``workbench analyze --json`` (workbench.pipeline.result documents the schema)."""

from __future__ import annotations

SCHEMA_NOTES = (
    ("workbench.analyze/1", "run, summary, diagnoses, verdict, metrics, collectives, clock"),
    ("workbench.analyze/1", "+ efficiency (FLOPs, MFU, kernel classes); summary.host_ahead"),
    ("workbench.analyze/1", "+ summary.trace_step_ms, steps_covered, job, capture_overhead, note (the job's step)"),
    ("workbench.analyze/1", "+ model; efficiency.hfu_pct, hfu_bf16_pct, mfu_source, mfu_convention, mfu_note, "
                            "model_flops_per_step (MFU counts the model's FLOPs); metrics.mfu_pct, hfu_pct"),
    ("workbench.analyze/1", "+ diagnoses[].alternatives (the planner's answers to a finding)"),
    ("workbench.analyze/1", "+ memory (by category); diagnoses out_of_memory and job_failed (a failed run's verdict, "
                            "with or without a trace); a run whose steps are time windows says so in run.warnings and "
                            "the verdict, and leaves out metrics.steady_step_ms, tokens_per_s, mfu_pct, hfu_pct"),
    ("workbench.analyze/1", "+ expert_load (MoE runs whose expert load was recorded); metrics.expert_maxvio"),
    ("workbench.analyze/1", "+ run.partial, run.devices (a partial run, ranks on different GPU models), where so"),
    ("workbench.analyze/1", "+ implausible (figures withheld past their physical bounds), where there are any; "
                            "no NaN or Infinity (a non-finite figure is null)"),
    ("workbench.analyze/1", "+ efficiency.mfu_by_convention (torchtitan, megatron, palm), efficiency.moe (routing and "
                            "dispatch shares of the step); model.expert_load; model fields of mixtures of experts and "
                            "latent attention (experts, top_k, shared_experts, moe_ffn, moe_layers, dense_layers, "
                            "params_active, v_head_dim, attention, q_lora_rank, kv_lora_rank), layout.ep"),
    ("workbench.analyze/1", "+ efficiency.mfu_by_convention.nanogpt, the headline's convention (torchtitan's entry "
                            "now its own count: a tied table left out); model.fields.qk_norm"),
    ("workbench.analyze/1", "+ history (the whole run's steps, change points and their causes, the history's cost), "
                            "where the run has a step history; diagnosis mid_run_slowdown; windows (the launch window and those opened "
                            "while the job ran, each analysed and set against the launch window)"),
)
"""What each release added to the schema, oldest first (CHANGELOG.md has the dates)."""
