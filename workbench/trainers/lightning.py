"""PyTorch Lightning (``lightning.pytorch.Trainer`` / ``pytorch_lightning.Trainer``): with automatic
optimization it passes a closure to ``optimizer.step(closure)``: the training step's forward and
backward run *inside* ``Optimizer.step`` (with a GradScaler, just before the update). Its layout is
``Trainer(strategy=…, precision=…, accumulate_grad_batches=…)``; ``trainer.global_step`` counts from 0.
Its own record functions (``[pl][profile]…``) are written only under its PyTorchProfiler.
"""

from __future__ import annotations

from typing import Any

from workbench.trainers import deepspeed as _deepspeed
from workbench.trainers.base import Spec, precision_of, register

_PRECISION = {"bf16": '"bf16-mixed"', "fp16": '"16-mixed"', "fp32": '"32-true"'}
_FSDP = {3: '"FULL_SHARD"', 2: '"SHARD_GRAD_OP"', 0: '"NO_SHARD"'}


def lines(setting: str, value: Any) -> str | None:
    if setting == "precision":
        p = precision_of(value)
        return f"Trainer(precision={_PRECISION[p]})" if p else None
    if setting == "grad_accum":
        return f"Trainer(accumulate_grad_batches={int(value)})"
    if setting == "zero_stage":
        v = int(value)
        if v == 0:
            return 'Trainer(strategy="ddp") (one device: strategy="auto")'
        if v == 1:
            return 'Trainer(strategy="deepspeed_stage_1")'
        return (f'Trainer(strategy="deepspeed_stage_{v}") or Trainer(strategy=FSDPStrategy(sharding_strategy={_FSDP[v]}))')
    if setting == "optimizer_offload":
        return ('Trainer(strategy=DeepSpeedStrategy(stage=3, offload_optimizer=True)) (strategy="deepspeed_stage_3_offload")'
                if value else "Trainer(strategy=DeepSpeedStrategy(stage=…, offload_optimizer=False)) "
                              '(strategy="deepspeed_stage_2" or "deepspeed_stage_3", without "_offload")')
    if setting == "param_offload":
        return ("Trainer(strategy=DeepSpeedStrategy(stage=3, offload_parameters=True)) or FSDPStrategy(cpu_offload=True)"
                if value else "Trainer(strategy=DeepSpeedStrategy(stage=3, offload_parameters=False)) or "
                              "FSDPStrategy(cpu_offload=False)")
    if setting == "micro_batch":
        return f"DataLoader(batch_size={int(value)}) in the LightningModule's or DataModule's train_dataloader()"
    if setting == "num_workers":
        return f"DataLoader(num_workers={int(value)}, persistent_workers=True) in train_dataloader()"
    if setting == "recompute":
        if value == "none":
            return "Trainer(strategy=FSDPStrategy(activation_checkpointing_policy=None)) (or no checkpoint() in the model)"
        if value == "full":
            return "Trainer(strategy=FSDPStrategy(activation_checkpointing_policy={Block})) (Block: your transformer block)"
        return None
    if setting == "fused_optimizer":
        return "torch.optim.AdamW(self.parameters(), fused=True) in configure_optimizers()" if value else None
    return None


def read(trainer: Any) -> dict[str, Any]:
    """Settings of a live Lightning ``Trainer``: its strategy, precision, accumulation, devices, and
    the train DataLoader's batch size and workers once ``fit`` made it."""
    out: dict[str, Any] = {}
    strategy = getattr(trainer, "strategy", None)
    if strategy is not None:
        out["strategy"] = type(strategy).__name__
        name = out["strategy"]
        if name.startswith("DeepSpeed") and isinstance(getattr(strategy, "config", None), dict):
            out.update({k: v for k, v in _deepspeed.config_settings(strategy.config).items()
                        if k not in ("micro_batch", "grad_accum")})  # Lightning sets these itself
        elif name.startswith("FSDP"):
            shard = str(getattr(strategy, "sharding_strategy", "FULL_SHARD")).upper()
            out["zero_stage"] = 3 if "FULL_SHARD" in shard or "HYBRID" in shard else 2 if "GRAD_OP" in shard else 0
            off = getattr(strategy, "cpu_offload", None)
            out["param_offload"] = out["optimizer_offload"] = bool(getattr(off, "offload_params", off))
        elif name in ("DDPStrategy", "SingleDeviceStrategy", "DDPSpawnStrategy"):
            out["zero_stage"] = 0
    prec = getattr(trainer, "precision", None)
    if prec is not None:
        out["precision_setting"] = str(prec)
        p = precision_of(prec)
        if p:
            out["precision"] = p
    acc = getattr(trainer, "accumulate_grad_batches", None)
    if isinstance(acc, int):
        out["grad_accum"] = acc
    devices = getattr(trainer, "num_devices", None)
    if isinstance(devices, int):
        out["devices"] = devices
    try:
        loader = getattr(trainer, "train_dataloader", None)
    except Exception:  # a property that raises before fit
        loader = None
    if loader is not None:
        bs, nw = getattr(loader, "batch_size", None), getattr(loader, "num_workers", None)
        if isinstance(bs, int):
            out["micro_batch"] = bs
        if isinstance(nw, int):
            out["num_workers"] = nw
    model = getattr(trainer, "lightning_module", None)
    if model is not None and hasattr(model, "automatic_optimization"):
        out["automatic_optimization"] = bool(model.automatic_optimization)
    return out


TRAINER = register(Spec(
    name="lightning", title="PyTorch Lightning",
    modules=("lightning.pytorch", "pytorch_lightning"),
    classes=("lightning.pytorch.trainer.trainer.Trainer", "pytorch_lightning.trainer.trainer.Trainer"),
    trace_markers=(r"^\[pl\]\[", r"^Optimizer\.step#LightningOptimizer\.step$"),
    within=("deepspeed", "accelerate"),
    step="one optimizer step: accumulate_grad_batches training_step calls",
    optimizer_step="optimizer.step(closure): the closure runs training_step's forward and backward inside it",
    micro_batch="one training_step (forward and backward) on one batch",
    step_base=0,
    config_names={"precision": "Trainer(precision=…)", "grad_accum": "Trainer(accumulate_grad_batches=…)",
                  "zero_stage": "Trainer(strategy=…)", "optimizer_offload": "DeepSpeedStrategy(offload_optimizer=…)",
                  "param_offload": "DeepSpeedStrategy(offload_parameters=…) / FSDPStrategy(cpu_offload=…)",
                  "micro_batch": "DataLoader(batch_size=…)", "num_workers": "DataLoader(num_workers=…)",
                  "recompute": "FSDPStrategy(activation_checkpointing_policy=…)"},
    lines=lines, reader=read))
