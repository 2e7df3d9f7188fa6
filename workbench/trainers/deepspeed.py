"""DeepSpeed (``deepspeed.initialize`` → ``DeepSpeedEngine``): ``engine.backward(loss)`` per micro-batch,
``engine.step()`` every ``gradient_accumulation_steps`` micro-batches. Its layout lives in the JSON
config (``zero_optimization.stage``, ``offload_optimizer``/``offload_param``, ``train_micro_batch_size_per_gpu``,
``gradient_accumulation_steps``, ``bf16``/``fp16``); its steps print as ``step=N`` counted from 1.

In a trace: ZeRO-3 wraps every module in its own autograd functions (``PreBackwardFunctionForModule``,
``PostBackwardFunctionModule``; ``LinearFunctionForZeroStage3`` under ``zero.Init``), whose backward
nodes gather and release parameters — none of it is recomputation. Its module hooks run the gathers and
releases in the forward (a module's pre-forward hook fetches its parameters and ends by applying
``PostBackwardFunctionModule``; its post-forward hook releases them and ends by applying
``PreBackwardFunctionForModule``: deepspeed/runtime/zero/parameter_offload.py), their backward nodes in
the backward: what :data:`SHARDING_RANGES`, :data:`FETCHED` and :data:`RELEASED` name for the trace's
reading.

Beside its optimizer's fp32 partition (what the capture measures), DeepSpeed keeps the module's
parameters in the compute precision on the device (partitioned at stage 3; on the host with
``offload_param``) and, at stages 2 and 3 with ``contiguous_gradients`` (on unless set), a gradient
reduction bucket of ``reduce_bucket_size`` elements (5e8 unless set) in that precision, allocated whole
(deepspeed/runtime/zero/stage3.py, stage_1_and_2.py): :func:`device_states`.
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


SHARDING_RANGES = (r"^autograd::engine::evaluate_function: (?:PreBackwardFunctionForModule|PostBackwardFunctionModule|"
                   r"PreBackwardFunction|PostBackwardFunction)Backward$",)
"""ZeRO-3's backward nodes that fetch a module's parameters before its backward and release them after."""
FETCHED = (r"^(?:PostBackwardFunctionModule|PostBackwardFunction)$",)
"""The last thing ZeRO-3's pre-forward hook does, the fetch done: apply ``PostBackwardFunctionModule``
to the module's inputs."""
RELEASED = (r"^(?:PreBackwardFunctionForModule|PreBackwardFunction)$",)
"""The last thing its post-forward hook does, the release done: apply ``PreBackwardFunctionForModule``
to the module's outputs."""
BUCKET_ELEMENTS = 500_000_000
"""``zero_optimization.reduce_bucket_size``'s default (deepspeed/runtime/zero/config.py: 5e8)."""
BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def device_states(settings: dict, config: dict | None, params: int, dp: int) -> dict[str, Any]:
    """The module's parameters in the compute precision and the gradient reduction bucket (module
    docstring), bytes on one device; {} without ZeRO (the engine's module is then the optimizer's)."""
    stage = settings.get("zero_stage")
    if not isinstance(stage, int) or stage < 1 or params <= 0:
        return {}
    zero = (config or {}).get("zero_optimization") if isinstance((config or {}).get("zero_optimization"), dict) else {}
    per = BYTES.get(str(settings.get("precision") or "fp32"), 4)
    shard = max(int(dp or 1), 1) if stage == 3 else 1
    weights = 0 if settings.get("param_offload") else params * per // shard
    bucket = zero.get("reduce_bucket_size", BUCKET_ELEMENTS)
    contiguous = zero.get("contiguous_gradients", True)
    grads = int(float(bucket)) * per if stage >= 2 and contiguous and isinstance(bucket, (int, float)) else 0
    parts = [f"the module's parameters in {settings.get('precision') or 'fp32'} ({params:,} × {per} B"
             + (f" / {shard} ranks" if shard > 1 else "") + ")" if weights else
             "the module's parameters on the host (offload_param)"]
    if grads:
        parts.append(f"a gradient reduction bucket of {int(float(bucket)):,} elements × {per} B (reduce_bucket_size)")
    return {"weights": weights, "gradients": grads,
            "source": "DeepSpeed's own, inferred from its configuration: " + "; ".join(parts)}


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
    sharding_ranges=SHARDING_RANGES, sharding_fetched=FETCHED, sharding_released=RELEASED,
    lines=lines, reader=read, states=device_states))
