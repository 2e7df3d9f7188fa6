"""An engine run as the planner sees it: its manifest's config → model, layout, stack, batch.

This is what lets the planner be checked against the bundled engine (``workbench train``): the
same config that ran is predicted, and the prediction is held against what the run measured
(:mod:`workbench.calibration.checks`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from workbench.format import manifest as manifest_file
from workbench.format.errors import WorkbenchError
from workbench.plan.layout import Layout, Stack, torch_stack
from workbench.plan.model import ModelSpec

ZERO_OF_MODE = {"single": 0, "ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "tp": 0, "pp": 0}
OPTIMIZER_STATE_BYTES = {"adamw": 8, "sgd": 4, "lion": 4}


@dataclass(kw_only=True, slots=True, frozen=True)
class EngineCase:
    """One engine run, translated."""

    name: str
    """The run directory's name."""
    model: ModelSpec
    layout: Layout
    stack: Stack
    global_batch: int
    """Sequences per optimizer step (all replicas)."""
    world: int
    device: str
    """cpu | cuda."""
    device_name: str | None
    """The GPU's name (manifest), None on CPU."""
    compiled: bool
    """train.compile: the blocks ran under torch.compile (fused elementwise kernels)."""


def read_manifest(run: str | Path) -> dict:
    """The run's manifest through the one checked reader (workbench.format.manifest): a directory, bad
    JSON, deep nesting or mistyped keys are one-line errors or left-out keys, never a traceback."""
    if not (Path(run) / "manifest.json").exists():
        raise WorkbenchError(f"{run}: no manifest.json (not a workbench run directory)")
    return manifest_file.read_manifest(run)


def engine_case(run: str | Path, manifest: dict | None = None) -> EngineCase:
    """The planner's inputs for an engine run; WorkbenchError when the run is not one."""
    man = manifest if manifest is not None else read_manifest(run)
    cfg = man.get("config") or {}
    if not isinstance(cfg, dict) or "model" not in cfg or "parallel" not in cfg:
        raise WorkbenchError(f"{run}: not an engine run (its manifest has no engine config)")
    try:
        return _engine_case(run, man, cfg)
    except WorkbenchError as e:  # a count past what the planner takes (validate): which run, which key
        raise WorkbenchError(f"{run}: its manifest's engine config is not one the engine writes ({e}); re-run it or "
                             "plan it with MODEL --gpus N --gpu NAME") from None
    except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError, OverflowError) as e:
        # a hand-edited or truncated config: say which run, not where the translation tripped
        raise WorkbenchError(f"{run}: its manifest's engine config is not one the engine writes "
                             f"({type(e).__name__}: {e}); re-run it or plan it with MODEL --gpus N --gpu NAME") from None


def _whole(key: str, v, lo: int = 1, hi: int = 1_000_000_000) -> int:
    """A count of the engine's config, checked (workbench.plan.validate: a whole number in [lo, hi])."""
    from workbench.plan.validate import integer

    return integer(key, v, lo, hi)


def _engine_case(run: str | Path, man: dict, cfg: dict) -> EngineCase:
    mc, pc, dc, tc = cfg["model"], cfg["parallel"], cfg["data"], cfg["train"]
    # every count the planner does arithmetic with: a batch of 1e30 or a grad_accum of inf is no engine run
    dc = {**dc, "batch_size": _whole("data.batch_size", dc["batch_size"])}
    tc = {**tc, "grad_accum": _whole("train.grad_accum", tc.get("grad_accum", 1))}
    pc = {**pc, **{k: _whole(f"parallel.{k}", pc[k], hi=10_000_000) for k in ("tp", "pp", "dp", "ep", "microbatches")
                   if pc.get(k) is not None}}
    world = int(man.get("world_size") or 1)
    ranks = man.get("ranks") or {}
    device = (next(iter(ranks.values()), {}) or {}).get("device") or ("cuda" if man.get("device_memory_bytes") else "cpu")
    device = "cuda" if str(device).startswith("cuda") else "cpu"
    moe = {}
    if mc.get("moe_experts"):
        # the engine's MoE blocks (engine.moe): a router h × E without bias, SwiGLU experts, one shared
        # SwiGLU MLP of moe_shared_experts × moe_ffn; its dense blocks keep the GELU MLP, which one
        # `gated` cannot say beside gated experts: with moe_dense_layers > 0 they count as gated
        moe = dict(experts=int(mc["moe_experts"]), top_k=int(mc.get("moe_top_k", 2)),
                   shared_experts=int(mc.get("moe_shared_experts") or 0), moe_ffn=int(mc["moe_ffn"]),
                   dense_layers=int(mc.get("moe_dense_layers") or 0), gated=True)
    model = ModelSpec(name=f"engine:{Path(run).name}", layers=mc["n_layer"], hidden=mc["d_model"], heads=mc["n_head"],
                      vocab=mc["vocab"], seq=mc["seq_len"], tied=bool(mc.get("tie_embeddings", True)), **moe)
    mode = pc["mode"]
    tp = int(pc.get("tp") or 1)
    pp = int(pc.get("pp") or 1)
    if mode == "tp" and tp == 1:
        tp = world if pc.get("dp") is None else world // pc["dp"]
    if mode == "pp" and pp == 1:
        pp = world // tp if pc.get("dp") is None else world // (pc["dp"] * tp)
    dp = int(pc.get("dp") or world // (tp * pp))
    fsdp = mode in ("zero2", "zero3") or (mode in ("tp", "pp") and dp > 1)
    zero = ZERO_OF_MODE[mode]
    if fsdp and mode in ("tp", "pp"):
        reshard = pc.get("reshard_after_forward")
        zero = 3 if (reshard if reshard is not None else mode == "tp") else 2
    mp = pc.get("mixed_precision", "auto")
    dtype = "bf16" if (mp == "bf16" or (mp == "auto" and device == "cuda")) else "fp32"
    accum = 1 if mode == "pp" else int(tc.get("grad_accum", 1))
    if mode == "pp":
        mbs = int(pc.get("microbatches", 1))
        mb = dc["batch_size"] // mbs
        schedule = pc.get("pp_schedule", "1f1b")
    else:
        mbs, mb, schedule = accum, dc["batch_size"], "1f1b"
    layout = Layout(tp=tp, pp=pp, dp=dp, zero=zero, mb=mb, recompute="full" if tc.get("activation_checkpointing") else tc.get("recompute", "none"),
                    schedule=schedule, ep=int(pc.get("ep") or 1) if moe else 1)
    autocast = dtype == "bf16" and not fsdp
    stack = replace(torch_stack(dtype, zero=zero if fsdp else min(zero, 1), autocast=autocast,
                                optimizer_bytes=OPTIMIZER_STATE_BYTES.get(tc.get("optimizer", "adamw"), 8),
                                reduce_each_microbatch=not pc.get("no_sync", False), pipeline=pp > 1),
                    ddp_bucket_copy=mode in ("ddp", "zero1"))
    return EngineCase(name=Path(run).name, model=model, layout=layout, stack=stack, global_batch=mb * mbs * dp,
                      world=world, device=device, device_name=man.get("device_name") if device == "cuda" else None,
                      compiled=bool(tc.get("compile")))
