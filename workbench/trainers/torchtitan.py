"""torchtitan (``torchtitan.train.Trainer``, configured by ``JobConfig`` from a TOML file and
``--section.key`` flags). Its steps count from 1 (``step:  1  loss: …``) and its MFU is its own
convention (``get_nparams_and_flops``: analysis.model.conventions' ``torchtitan``). In a trace its
optimizers step as ``Optimizer.step#OptimizersContainer.step``.
"""

from __future__ import annotations

from typing import Any

from workbench.trainers.base import Spec, precision_of, register

_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def lines(setting: str, value: Any) -> str | None:
    if setting == "recompute":
        if value in ("none", "full"):
            return f"--activation_checkpoint.mode {value}"
        if value == "op":  # its default selective option: every other matmul's output and attention's saved
            return "--activation_checkpoint.mode selective --activation_checkpoint.selective_ac_option op"
        if str(value).startswith("layer:"):
            return f"--activation_checkpoint.mode selective --activation_checkpoint.selective_ac_option {str(value)[6:]}"
        return None  # no attention-core-only policy ('selective' in Korthikanti's sense)
    if setting == "micro_batch":
        return f"--training.local_batch_size {int(value)}"
    if setting == "grad_accum":
        return f"--training.global_batch_size (local_batch_size × data-parallel degree × {int(value)})"
    if setting == "zero_stage":
        v = int(value)
        if v == 0:
            return "--parallelism.data_parallel_shard_degree 1 --parallelism.data_parallel_replicate_degree -1 (DDP)"
        if v == 2:
            return "--parallelism.fsdp_reshard_after_forward never"
        if v == 3:
            return "--parallelism.fsdp_reshard_after_forward always"
        return None
    if setting in ("optimizer_offload", "param_offload"):
        return f"--training.enable_cpu_offload {str(bool(value)).lower()}"
    if setting == "precision":
        p = precision_of(value)
        return f"--training.mixed_precision_param {_DTYPE[p]}" if p else None
    return None


def read(trainer: Any) -> dict[str, Any]:
    """Settings of a live torchtitan ``Trainer`` from its ``job_config``."""
    jc = getattr(trainer, "job_config", None)
    out: dict[str, Any] = {}
    if jc is None:
        return out
    tr, par, ac = getattr(jc, "training", None), getattr(jc, "parallelism", None), getattr(jc, "activation_checkpoint", None)
    if tr is not None:
        if isinstance(getattr(tr, "local_batch_size", None), int):
            out["micro_batch"] = tr.local_batch_size
        if isinstance(getattr(tr, "enable_cpu_offload", None), bool):
            out["param_offload"] = out["optimizer_offload"] = tr.enable_cpu_offload
        p = precision_of(getattr(tr, "mixed_precision_param", None))
        if p:
            out["precision"] = p
    if ac is not None and getattr(ac, "mode", None) in ("none", "full"):
        out["recompute"] = ac.mode
    elif ac is not None and getattr(ac, "mode", None) == "selective":
        option = str(getattr(ac, "selective_ac_option", "op"))
        if option == "op":
            out["recompute"] = "op"
        elif option.isdigit():  # every N-th block whole (1 or 0: every block)
            out["recompute"] = f"layer:{int(option)}" if int(option) > 1 else "full"
    if par is not None:
        shard = getattr(par, "data_parallel_shard_degree", None)
        if isinstance(shard, int):
            out["fsdp_degree"] = shard
        rf = getattr(par, "fsdp_reshard_after_forward", None)
        if rf is not None:
            out["reshard_after_forward"] = str(rf)
    acc = getattr(trainer, "gradient_accumulation_steps", None)
    if isinstance(acc, int) and not isinstance(acc, bool):
        out["grad_accum"] = acc
    return out


TRAINER = register(Spec(
    name="torchtitan", title="torchtitan",
    modules=("torchtitan.train", "torchtitan"),
    classes=("torchtitan.train.Trainer",),
    trace_markers=(r"^Optimizer\.step#OptimizersContainer\.step$",),
    step="one train_step: gradient_accumulation_steps micro-batches and the optimizers' step",
    optimizer_step="OptimizersContainer.step() over the model parts' optimizers",
    micro_batch="one forward_backward_step on local_batch_size samples",
    step_base=1, mfu_convention="torchtitan",
    config_names={"recompute": "activation_checkpoint.mode (+ selective_ac_option)", "micro_batch": "training.local_batch_size",
                  "grad_accum": "training.global_batch_size", "zero_stage": "parallelism.fsdp_reshard_after_forward",
                  "optimizer_offload": "training.enable_cpu_offload", "param_offload": "training.enable_cpu_offload",
                  "precision": "training.mixed_precision_param"},
    lines=lines, reader=read))
