"""Hugging Face's ``transformers.Trainer`` (and its subclasses: TRL's ``SFTTrainer`` …): its layout
is ``TrainingArguments`` (``per_device_train_batch_size``, ``gradient_accumulation_steps``,
``gradient_checkpointing``, ``bf16``/``fp16``, ``dataloader_num_workers``, ``deepspeed``, ``fsdp``),
each also a command-line flag of the example scripts. It runs on Accelerate (and DeepSpeed or FSDP
through it); its log's ``step`` (``state.global_step``) counts from 1.
"""

from __future__ import annotations

from typing import Any

from workbench.trainers import deepspeed as _deepspeed
from workbench.trainers.base import Spec, precision_of, register

_FSDP = {3: '"full_shard"', 2: '"shard_grad_op"'}


def lines(setting: str, value: Any) -> str | None:
    if setting == "micro_batch":
        return f"TrainingArguments(per_device_train_batch_size={int(value)})"
    if setting == "grad_accum":
        return f"TrainingArguments(gradient_accumulation_steps={int(value)})"
    if setting == "recompute":
        if value in ("none", "full"):
            return f"TrainingArguments(gradient_checkpointing={value == 'full'})"
        if str(value).startswith("layer:"):  # transformers 5: every N-th decoder layer (0, N, 2N …) checkpointed
            return (f"TrainingArguments(gradient_checkpointing=True, "
                    f"gradient_checkpointing_kwargs={{\"every_n_layers\": {str(value)[6:]}}})")
        return None
    if setting == "precision":
        p = precision_of(value)
        return {"bf16": "TrainingArguments(bf16=True)", "fp16": "TrainingArguments(fp16=True)",
                "fp32": "TrainingArguments(bf16=False, fp16=False)"}.get(p or "")
    if setting == "num_workers":
        return f"TrainingArguments(dataloader_num_workers={int(value)}, dataloader_persistent_workers=True)"
    if setting == "zero_stage":
        v = int(value)
        if v == 0:
            return 'TrainingArguments(fsdp="", deepspeed=None)'
        ds = f'TrainingArguments(deepspeed="ds_config.json") with {_deepspeed.lines("zero_stage", v)}'
        return ds + (f" or TrainingArguments(fsdp={_FSDP[v]})" if v in _FSDP else "")
    if setting in ("optimizer_offload", "param_offload"):
        ds = _deepspeed.lines(setting, value)
        fsdp = 'TrainingArguments(fsdp="full_shard offload")' if value else 'TrainingArguments(fsdp="full_shard")'
        return f'TrainingArguments(deepspeed="ds_config.json") with {ds}, or {fsdp}'
    if setting == "fused_optimizer":
        return 'TrainingArguments(optim="adamw_torch_fused")' if value else None
    return None


def read(trainer: Any) -> dict[str, Any]:
    """Settings of a live ``transformers.Trainer`` from its ``args`` (TrainingArguments)."""
    args = getattr(trainer, "args", None)
    out: dict[str, Any] = {}
    if args is None:
        return out
    for attr, key in (("per_device_train_batch_size", "micro_batch"), ("gradient_accumulation_steps", "grad_accum"),
                      ("dataloader_num_workers", "num_workers")):
        v = getattr(args, attr, None)
        if isinstance(v, int) and not isinstance(v, bool):
            out[key] = v
    gc = getattr(args, "gradient_checkpointing", None)
    if isinstance(gc, bool):
        out["recompute"] = "full" if gc else "none"
        kw = getattr(args, "gradient_checkpointing_kwargs", None)
        n = kw.get("every_n_layers") if isinstance(kw, dict) else None
        if gc and isinstance(n, int) and not isinstance(n, bool) and n > 1:
            out["recompute"] = f"layer:{n}"
    out["precision"] = "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else "fp32"
    optim = getattr(args, "optim", None)
    if optim is not None:
        out["optimizer"] = str(getattr(optim, "value", optim))
    ds = getattr(args, "hf_deepspeed_config", None)
    ds_conf = getattr(ds, "config", None)
    if isinstance(ds_conf, dict):
        out.update({k: v for k, v in _deepspeed.config_settings(ds_conf).items() if k in ("zero_stage", "optimizer_offload",
                                                                                           "param_offload")})
        out["backend"] = "deepspeed"
    fsdp = getattr(args, "fsdp", None)
    if fsdp:
        words = " ".join(str(getattr(f, "value", f)) for f in (fsdp if isinstance(fsdp, (list, tuple)) else [fsdp]))
        out["zero_stage"] = 3 if "full_shard" in words or "hybrid" in words else 2 if "shard_grad_op" in words else 0
        out["param_offload"] = out["optimizer_offload"] = "offload" in words
        out["backend"] = "fsdp"
    return out


TRAINER = register(Spec(
    name="hf_trainer", title="Hugging Face Trainer",
    modules=("transformers.trainer",),
    classes=("transformers.trainer.Trainer",),
    within=("accelerate", "deepspeed"),
    step="one optimizer step (state.global_step): gradient_accumulation_steps micro-batches",
    optimizer_step="self.optimizer.step() (Accelerate's AcceleratedOptimizer around the torch optimizer)",
    micro_batch="one training_step: per_device_train_batch_size samples, forward and backward",
    step_base=1,
    config_names={"micro_batch": "per_device_train_batch_size", "grad_accum": "gradient_accumulation_steps",
                  "recompute": "gradient_checkpointing", "precision": "bf16 / fp16", "num_workers": "dataloader_num_workers",
                  "zero_stage": "deepspeed (its zero_optimization.stage) / fsdp",
                  "optimizer_offload": "deepspeed's offload_optimizer / fsdp offload",
                  "param_offload": "deepspeed's offload_param / fsdp offload", "fused_optimizer": "optim"},
    lines=lines, reader=read))
