"""DeepSpeed (``deepspeed.initialize`` → ``DeepSpeedEngine``): ``engine.backward(loss)`` per micro-batch,
``engine.step()`` every ``gradient_accumulation_steps`` micro-batches. Its layout lives in the JSON
config (``zero_optimization.stage``, ``offload_optimizer``/``offload_param``, ``train_micro_batch_size_per_gpu``,
``gradient_accumulation_steps``, ``bf16``/``fp16``); its steps print as ``step=N`` counted from 1.

In a trace: ZeRO-3 wraps every module in its own autograd functions (``PreBackwardFunctionForModule``,
``PostBackwardFunctionModule``; ``LinearFunctionForZeroStage3`` under ``zero.Init``), whose backward
nodes gather and release parameters — none of it is recomputation.
"""

from __future__ import annotations

import json
from typing import Any

from workbench.trainers.base import Spec, precision_of, register

ZERO3_FUNCTIONS = ("PreBackwardFunctionForModule", "PostBackwardFunctionModule", "PreBackwardFunction",
                   "PostBackwardFunction", "LinearFunctionForZeroStage3", "LinearModuleForZeroStage3")
"""ZeRO-3's autograd functions (deepspeed/runtime/zero/parameter_offload.py, linear.py): their forward
and backward spans gather, release and reduce; a GEMM inside ``LinearFunctionForZeroStage3Backward``
is the linear's own backward."""


def _cfg(path: str, value: Any) -> str:
    """``"a": {"b": value}`` as a line of the DeepSpeed JSON config."""
    keys = path.split(".")
    text = json.dumps(value)
    for k in reversed(keys):
        text = f'{{"{k}": {text}}}'
    return f"DeepSpeed config: {text[1:-1]}"


def lines(setting: str, value: Any) -> str | None:
    if setting == "zero_stage":
        return _cfg("zero_optimization.stage", int(value))
    if setting == "optimizer_offload":
        return _cfg("zero_optimization.offload_optimizer", {"device": "cpu", "pin_memory": True} if value else {"device": "none"})
    if setting == "param_offload":
        return _cfg("zero_optimization.offload_param", {"device": "cpu", "pin_memory": True} if value else {"device": "none"})
    if setting == "micro_batch":
        return _cfg("train_micro_batch_size_per_gpu", int(value))
    if setting == "grad_accum":
        return _cfg("gradient_accumulation_steps", int(value))
    if setting == "precision":
        p = precision_of(value)
        if p == "fp32":
            return 'DeepSpeed config: "bf16": {"enabled": false}, "fp16": {"enabled": false}'
        return _cfg(p, {"enabled": True}) if p else None
    if setting == "recompute":
        if value == "none":
            return "no deepspeed.checkpointing.checkpoint(...) around the blocks (model.gradient_checkpointing_disable())"
        if value == "full":
            return ("deepspeed.checkpointing.checkpoint(block, x) around each block (model.gradient_checkpointing_enable()), "
                    'with DeepSpeed config: "activation_checkpointing": {"partition_activations": false}')
        return None
    if setting == "fused_optimizer":
        return ('DeepSpeed config: "optimizer": {"type": "AdamW"} (its fused Adam; with offload_optimizer, its CPU Adam: '
                '"zero_force_ds_cpu_optimizer": true)') if value else None
    return None


def _device(offload: Any) -> bool | None:
    if offload is None:
        return False
    dev = offload.get("device") if isinstance(offload, dict) else getattr(offload, "device", None)
    return None if dev is None else str(getattr(dev, "value", dev)).lower() in ("cpu", "nvme")


def config_settings(config: dict) -> dict[str, Any]:
    """Settings from a DeepSpeed JSON config (a dict as ``deepspeed.initialize(config=…)`` takes it)."""
    out: dict[str, Any] = {}
    zero = config.get("zero_optimization") or {}
    if isinstance(zero, dict):
        if "stage" in zero:
            out["zero_stage"] = int(zero["stage"])
        out["optimizer_offload"] = bool(_device(zero.get("offload_optimizer")))
        out["param_offload"] = bool(_device(zero.get("offload_param")))
    for key, name in (("train_micro_batch_size_per_gpu", "micro_batch"), ("gradient_accumulation_steps", "grad_accum")):
        if isinstance(config.get(key), int):
            out[name] = config[key]
    enabled = {p: (config.get(p) or {}).get("enabled") if isinstance(config.get(p), dict) else None for p in ("bf16", "fp16")}
    if "auto" not in enabled.values():  # "auto": Hugging Face's Trainer fills it in from its own arguments
        out["precision"] = next((p for p, e in enabled.items() if e is True), "fp32")
    opt = config.get("optimizer")
    if isinstance(opt, dict) and opt.get("type"):
        out["optimizer"] = str(opt["type"])
    return out


def read(engine: Any) -> dict[str, Any]:
    """Settings of a live ``DeepSpeedEngine`` (its accessors, as the engine itself reads them)."""
    out: dict[str, Any] = {}

    def call(name: str) -> Any:
        f = getattr(engine, name, None)
        try:
            return f() if callable(f) else None
        except Exception:  # an accessor that needs state the engine does not have yet
            return None

    stage = call("zero_optimization_stage")
    if stage is not None:
        out["zero_stage"] = int(stage)
    for name, key in (("train_micro_batch_size_per_gpu", "micro_batch"), ("gradient_accumulation_steps", "grad_accum")):
        v = call(name)
        if isinstance(v, int):
            out[key] = v
    out["precision"] = "bf16" if call("bfloat16_enabled") else "fp16" if call("fp16_enabled") else "fp32"
    if stage:
        out["optimizer_offload"] = bool(_device(call("zero_offload_optimizer")))
        out["param_offload"] = bool(_device(call("zero_offload_param")))
    opt = getattr(engine, "optimizer", None)
    inner = getattr(opt, "optimizer", None)
    if inner is not None:
        out["optimizer"] = type(inner).__name__
    if opt is not None:
        out["zero_optimizer"] = type(opt).__name__
    return out


TRAINER = register(Spec(
    name="deepspeed", title="DeepSpeed",
    modules=("deepspeed",),
    classes=("deepspeed.runtime.engine.DeepSpeedEngine", "deepspeed.runtime.pipe.engine.PipelineEngine"),
    trace_markers=tuple(rf"^{f}(Backward)?$" for f in ZERO3_FUNCTIONS) + (r"DeepSpeedZeroOptimizer", r"^DeepSpeedCPUAdam"),
    step="engine.step() at a gradient-accumulation boundary",
    optimizer_step="the ZeRO optimizer's step (its wrapped torch or DeepSpeed optimizer, on the host with offload_optimizer)",
    micro_batch="engine(batch) + engine.backward(loss): train_micro_batch_size_per_gpu samples",
    step_base=1,
    config_names={"zero_stage": "zero_optimization.stage", "optimizer_offload": "zero_optimization.offload_optimizer.device",
                  "param_offload": "zero_optimization.offload_param.device", "micro_batch": "train_micro_batch_size_per_gpu",
                  "grad_accum": "gradient_accumulation_steps", "precision": "bf16.enabled / fp16.enabled",
                  "recompute": "activation_checkpointing (with deepspeed.checkpointing.checkpoint in the model)",
                  "fused_optimizer": "optimizer.type"},
    lines=lines, reader=read))
