"""Hugging Face Accelerate (``Accelerator`` around the user's own loop: ``accelerator.prepare``,
``accelerator.backward(loss)``, ``optimizer.step()`` through ``AcceleratedOptimizer``). Its layout is
``Accelerator(mixed_precision=…, gradient_accumulation_steps=…)`` and its plugins (``DeepSpeedPlugin``,
``FullyShardedDataParallelPlugin``) or ``accelerate config``'s YAML. The loop is the user's: steps
count as the user counts them (from 0 here).
"""

from __future__ import annotations

from typing import Any

from workbench.trainers.base import Spec, precision_of, register

_FSDP = {3: "FULL_SHARD", 2: "SHARD_GRAD_OP", 0: "NO_SHARD"}


def lines(setting: str, value: Any) -> str | None:
    if setting == "precision":
        p = precision_of(value)
        return f'Accelerator(mixed_precision="{"no" if p == "fp32" else p}")' if p else None
    if setting == "grad_accum":
        return f"Accelerator(gradient_accumulation_steps={int(value)}) with `with accelerator.accumulate(model):`"
    if setting == "zero_stage":
        v = int(value)
        if v == 0:
            return "Accelerator() without a DeepSpeed or FSDP plugin (DDP)"
        fsdp = f' or FullyShardedDataParallelPlugin(sharding_strategy="{_FSDP[v]}")' if v in _FSDP else ""
        return f"Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage={v})){fsdp}"
    if setting == "optimizer_offload":
        return f'DeepSpeedPlugin(offload_optimizer_device="{"cpu" if value else "none"}")'
    if setting == "param_offload":
        return (f'DeepSpeedPlugin(offload_param_device="{"cpu" if value else "none"}") or '
                f"FullyShardedDataParallelPlugin(cpu_offload={bool(value)})")
    return None  # micro-batch, workers, recomputation, optimizer: the user's own loop (plain PyTorch lines)


def read(obj: Any) -> dict[str, Any]:
    """Settings of a live ``Accelerator`` (or of the shared ``AcceleratorState`` an
    ``AcceleratedOptimizer`` carries)."""
    out: dict[str, Any] = {}
    state = getattr(obj, "state", None) or getattr(obj, "accelerator_state", None) or obj
    mp = getattr(obj, "mixed_precision", None) or getattr(state, "mixed_precision", None)
    if mp is not None:
        p = precision_of(mp) or ("fp32" if str(mp) == "no" else None)
        if p:
            out["precision"] = p
    acc = getattr(obj, "gradient_accumulation_steps", None)
    if acc is None:
        acc = getattr(getattr(obj, "gradient_state", None), "num_steps", None)
    if isinstance(acc, int):
        out["grad_accum"] = acc
    dt = getattr(state, "distributed_type", None)
    if dt is not None:
        out["distributed_type"] = str(getattr(dt, "value", dt))
    ds = getattr(state, "deepspeed_plugin", None)
    if ds is not None:
        stage = getattr(ds, "zero_stage", None)
        if isinstance(stage, int):
            out["zero_stage"] = stage
        for attr, key in (("offload_optimizer_device", "optimizer_offload"), ("offload_param_device", "param_offload")):
            v = getattr(ds, attr, None)
            if v is not None:
                out[key] = str(v).lower() in ("cpu", "nvme")
    fsdp = getattr(state, "fsdp_plugin", None)
    if fsdp is not None:
        shard = str(getattr(fsdp, "sharding_strategy", "") or getattr(fsdp, "reshard_after_forward", "")).upper()
        out["zero_stage"] = 2 if "GRAD_OP" in shard or shard == "FALSE" else 0 if "NO_SHARD" in shard else 3
        off = getattr(fsdp, "cpu_offload", None)
        out["param_offload"] = out["optimizer_offload"] = bool(getattr(off, "offload_params", off))
    return out


TRAINER = register(Spec(
    name="accelerate", title="Accelerate",
    modules=("accelerate",),
    classes=("accelerate.accelerator.Accelerator", "accelerate.optimizer.AcceleratedOptimizer"),
    trace_markers=(r"^Optimizer\.step#AcceleratedOptimizer\.step$",),
    within=("deepspeed",),
    step="the user's loop: optimizer.step() (skipped by accumulate() until a boundary)",
    optimizer_step="AcceleratedOptimizer.step() around the torch optimizer",
    micro_batch="one pass of the user's loop: forward and accelerator.backward(loss)",
    step_base=0,
    config_names={"precision": "Accelerator(mixed_precision=…)", "grad_accum": "Accelerator(gradient_accumulation_steps=…)",
                  "zero_stage": "DeepSpeedPlugin(zero_stage=…) / FullyShardedDataParallelPlugin(sharding_strategy=…)",
                  "optimizer_offload": "DeepSpeedPlugin(offload_optimizer_device=…)",
                  "param_offload": "DeepSpeedPlugin(offload_param_device=…)"},
    lines=lines, reader=read))
