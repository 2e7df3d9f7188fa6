"""The bundled engine (``workbench train``): one ``--set section.key=value`` line per setting
(``workbench train --print-config`` lists them); its log prints ``step N`` from 0 and an MFU by
PaLM appendix B's 6N + 12·L·H·Q·T (analysis.model.conventions' ``palm``).
"""

from __future__ import annotations

from typing import Any

from workbench.trainers.base import Spec, precision_of, register

_ZERO = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}


def lines(setting: str, value: Any) -> str | None:
    if setting == "recompute":  # the engine's modes: none, selective (the attention core), full
        return f"--set train.recompute={value}" if value in ("none", "selective", "full") else None
    if setting == "micro_batch":
        return f"--set data.batch_size={int(value)}"
    if setting == "grad_accum":
        return f"--set train.grad_accum={int(value)}"
    if setting == "zero_stage":
        return f"--set parallel.mode={_ZERO[int(value)]}"
    if setting in ("optimizer_offload", "param_offload"):
        return f"--set parallel.cpu_offload={str(bool(value)).lower()} (parallel.mode zero2 or zero3)"
    if setting == "precision":
        p = precision_of(value)
        return f"--set parallel.mixed_precision={p}" if p in ("bf16", "fp32") else None
    if setting == "num_workers":
        return f"--set data.num_workers={int(value)} --set data.persistent_workers=true"
    if setting == "fused_optimizer":
        return "--set train.optimizer=adamw (fused on GPU)" if value else None
    return None


def read(cfg: Any) -> dict[str, Any]:
    """Settings of the engine's live ``Config``."""
    out: dict[str, Any] = {}
    data, par, train = getattr(cfg, "data", None), getattr(cfg, "parallel", None), getattr(cfg, "train", None)
    if data is not None:
        out["micro_batch"], out["num_workers"] = data.batch_size, data.num_workers
    if train is not None:
        out["grad_accum"], out["recompute"] = train.grad_accum, train.recompute_mode
    if par is not None:
        out["zero_stage"] = {"zero1": 1, "zero2": 2, "zero3": 3}.get(par.mode, 0)
        out["param_offload"] = out["optimizer_offload"] = bool(par.cpu_offload)
        if par.mixed_precision != "auto":
            out["precision"] = par.mixed_precision
    return out


TRAINER = register(Spec(
    name="engine", title="workbench train",
    modules=("workbench.engine.train",),
    classes=("workbench.engine.config.Config",),
    step="one optimizer step: train.grad_accum micro-batches", optimizer_step="opt.step()",
    micro_batch="one forward and backward on data.batch_size sequences",
    step_base=0, mfu_convention="palm",
    config_names={"recompute": "train.recompute", "micro_batch": "data.batch_size", "grad_accum": "train.grad_accum",
                  "zero_stage": "parallel.mode", "optimizer_offload": "parallel.cpu_offload",
                  "param_offload": "parallel.cpu_offload", "precision": "parallel.mixed_precision",
                  "num_workers": "data.num_workers", "fused_optimizer": "train.optimizer"},
    lines=lines, reader=read))
