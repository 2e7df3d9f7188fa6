"""The run's ``efficiency`` JSON key: FLOPs per step, MFU and HFU, each convention's MFU.

MFU is the model's FLOPs (analysis.model's conventions: model FLOPs per token × tokens per step,
per device) over the step time × the device's dense peak; HFU is the FLOPs the trace executed
(analysis.kernel_classes: recomputation included, causal attention halved). Without a model, MFU
falls back to HFU and says why (:func:`mfu_note`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from workbench.analysis.kernel_classes import Efficiency, class_breakdown, unclassified
from workbench.analysis.model import CONVENTION, CONVENTIONS, flops_per_token, value
from workbench.analysis.moe_time import moe_shares


def efficiency_json(frames: dict[int, Efficiency], scale: pd.Series, model: dict, device_name: str | None,
                    world_size: int | None, moe: dict, step_ms: float | None = None) -> dict[str, Any] | None:
    """The ``efficiency`` JSON key from each rank's analysis.kernel_classes.efficiency (``frames``)
    set against the job's step (``scale``: rank → recorded / job step), the inferred ``model`` and
    the MoE time frames (``moe``: rank → analysis.moe_time); None when no FLOPs were counted.
    ``step_ms``: the step the run states (``summary.step_ms``): ``achieved_tflops`` is the FLOPs per step
    over it, so that FLOPs per step ÷ the printed step is the printed rate (on CPU traces the per-step
    rows keep their recorded steps: the job's step there is not the trace's device time)."""
    steps = [_per_step_of_job(e.per_step, scale.get(r, 1.0)).assign(rank=r) for r, e in frames.items() if not e.per_step.empty]
    steps = pd.concat(steps, ignore_index=True) if steps else pd.DataFrame()
    if steps.empty or not (steps["flops"] > 0).any():
        return None
    from workbench.hardware.peaks import device_peak

    def num(v):
        return None if v is None or (isinstance(v, float) and np.isnan(v)) else round(float(v), 4)

    by_dtype = pd.concat([e.ops.groupby("dtype")["flops"].sum() for e in frames.values()]).groupby(level=0).sum()
    kernels = pd.concat([e.kernels for e in frames.values() if not e.kernels.empty] or [pd.DataFrame()], ignore_index=True)
    classes = class_breakdown(kernels, device_name) if not kernels.empty else pd.DataFrame()
    peak = device_peak(device_name) if not kernels.empty else None  # a CPU trace: no GPU peak
    # HFU: the FLOPs the trace executed (recomputation included, causal attention halved)
    steps = steps.rename(columns={"mfu_pct": "hfu_pct", "mfu_bf16_pct": "hfu_bf16_pct"})
    hfu = num(steps["hfu_pct"].mean()) if steps["hfu_pct"].notna().any() else None
    hfu_bf16 = num(steps["hfu_bf16_pct"].mean()) if steps["hfu_bf16_pct"].notna().any() else None
    mfu = model_mfu(model, steps, peak, world_size)
    return {
        "flops_per_step": num(steps["flops"].mean()),
        "achieved_tflops": num(steps["flops"].mean() / (step_ms / 1e3) / 1e12) if step_ms and step_ms > 0
        else num(steps["tflops_per_s"].mean()),
        "mfu_pct": mfu["mfu_pct"] if mfu else hfu,
        "mfu_bf16_pct": mfu["mfu_bf16_pct"] if mfu else hfu_bf16,
        "hfu_pct": hfu,
        "hfu_bf16_pct": hfu_bf16,
        "mfu_source": "model" if mfu else "trace",
        "mfu_convention": ((model or {}).get("convention") or CONVENTION) if mfu else "the trace's executed FLOPs (HFU): " + _no_model(model),
        "model_flops_per_step": mfu["model_flops_per_step"] if mfu else None,
        "mfu_by_convention": mfu_by_convention(model, steps, peak, world_size),
        "moe": moe_shares(moe),
        "mfu_note": mfu_note(model, mfu["mfu_pct"] if mfu else None, hfu,
                             mfu["mfu_bf16_pct"] if mfu else None, hfu_bf16,
                             {str(d): 100.0 * f / by_dtype.sum() for d, f in by_dtype.items()}),
        "dtype_flops_pct": {str(d): round(100.0 * f / by_dtype.sum(), 2) for d, f in by_dtype.items()},
        "peak": {"tflops": dict(peak.tflops), "hbm_tb_s": peak.hbm_tb_s, "source": peak.source} if peak else None,
        "per_step": [{k: (int(v) if k in ("rank", "step") else num(v)) for k, v in row.items()}
                     for row in _per_step_mfu(steps, mfu)[["rank", "step", "step_ms", "flops", "tflops_per_s", "mfu_pct",
                                                           "mfu_bf16_pct", "hfu_pct", "hfu_bf16_pct"]].to_dict("records")],
        "classes": [{k: (num(v) if isinstance(v, (float, np.floating)) else (int(v) if isinstance(v, (int, np.integer)) else v))
                     for k, v in row.items()} for row in classes.to_dict("records")],
        "other_kernels": [{"name": str(r["name"]), "calls": int(r["calls"]), "time_ms": num(r["time_ms"])}
                          for r in (unclassified(kernels).to_dict("records") if not kernels.empty else [])],
    }


def _per_step_of_job(per_step: pd.DataFrame, scale: float) -> pd.DataFrame:
    """Efficiency rows of the recorded steps (analysis.kernel_classes) against the job's step:
    the FLOPs stay, the time is the job's (``scale`` = recorded / job step, Analysis.job_scale)."""
    if scale == 1.0 or per_step.empty:
        return per_step
    out = per_step.copy()
    out["step_ms"] = out["step_ms"] / scale
    for c in ("tflops_per_s", "mfu_pct", "mfu_bf16_pct"):
        if c in out:
            out[c] = out[c] * scale
    return out


MFU_NOTE_PCT = 5.0
"""MFU and HFU more than 5 % apart get one line saying why (two runs of one configuration differ by
a few per cent: compare.NOISE_PCT)."""


def model_flops_per_device_step(model: dict, world_size: int | None) -> float | None:
    """The convention's FLOPs of one optimizer step on one device: model_flops_per_token ×
    global_tokens_per_step / world size (every device of the job shares the step's work)."""
    fpt, tokens = value(model, "model_flops_per_token"), value(model, "global_tokens_per_step")
    world = (value(model, "layout") or {}).get("world_size") or world_size or 1
    if not fpt or not tokens:
        return None
    return float(fpt) * float(tokens) / float(world)


def model_mfu(model: dict, steps: pd.DataFrame, peak, world_size: int | None) -> dict[str, float] | None:
    """Model-FLOPs MFU of the job's step (``steps``: the efficiency rows against the job's step):
    the convention's FLOPs per device and step / (step time × the device's dense peak for the
    GEMMs' dtype), and against the bf16 peak; None without the model or a peak."""
    flops = model_flops_per_device_step(model, world_size)
    if flops is None or peak is None or steps.empty:
        return None
    dtype = value(model, "dtype") or "bf16"
    p, p16 = peak.tflops.get(dtype), peak.tflops.get("bf16")
    secs = float(steps["step_ms"].mean()) / 1e3
    if not p or secs <= 0:
        return None
    return {"model_flops_per_step": round(flops, 1), "mfu_pct": round(100.0 * flops / secs / (p * 1e12), 4),
            "mfu_bf16_pct": round(100.0 * flops / secs / (p16 * 1e12), 4) if p16 else None, "dtype": dtype, "flops": flops,
            "peak": p, "peak_bf16": p16}


def mfu_by_convention(model: dict, steps: pd.DataFrame, peak, world_size: int | None) -> dict[str, dict]:
    """Each convention's model FLOPs per token (analysis.model.conventions) and the MFU they give
    on the job's step (None without a peak: a CPU trace); ``torchtitan`` is the headline's."""
    out = {}
    fields = (model or {}).get("fields") or {}
    for name, formula in CONVENTIONS.items():
        fpt = flops_per_token(fields, name)
        if fpt is None:
            continue
        m = model_mfu({"fields": {**fields, "model_flops_per_token": fpt}}, steps, peak, world_size)
        out[name] = {"formula": formula, "model_flops_per_token": fpt["value"], "mfu_pct": m["mfu_pct"] if m else None}
    return out


def _per_step_mfu(steps: pd.DataFrame, mfu: dict | None) -> pd.DataFrame:
    out = steps.copy()
    if mfu is None:
        out["mfu_pct"], out["mfu_bf16_pct"] = out["hfu_pct"], out["hfu_bf16_pct"]
        return out
    secs = out["step_ms"] / 1e3
    out["mfu_pct"] = 100.0 * mfu["flops"] / secs / (mfu["peak"] * 1e12)
    out["mfu_bf16_pct"] = 100.0 * mfu["flops"] / secs / (mfu["peak_bf16"] * 1e12) if mfu["peak_bf16"] else None
    return out


def _no_model(model: dict) -> str:
    kind = (model or {}).get("kind")
    if kind is None:
        return "the model could not be inferred from the trace (no shapes or no step)"
    if kind != "transformer":
        return f"no per-token model FLOPs: the trace shows a model that is not a transformer (kind {kind!r})"
    missing = [k for k in ("params_non_embedding", "layers", "heads", "head_dim", "seq", "global_tokens_per_step")
               if value(model, k) is None]
    return f"the model's {', '.join(missing) or 'FLOPs'} could not be inferred"


def mfu_note(model: dict, mfu: float | None, hfu: float | None, mfu16: float | None = None,
             hfu16: float | None = None, dtype_pct: dict[str, float] | None = None) -> str | None:
    """One line when MFU and HFU are more than :data:`MFU_NOTE_PCT` apart (or when MFU fell back
    to the trace's FLOPs), saying why. FLOPs are compared against one peak (bf16's where there is
    one), so the line names a difference of FLOPs; HFU's per-dtype peaks are a reason of their own."""
    if mfu is None:
        return ("MFU is the trace's executed FLOPs (HFU): " + _no_model(model)) if hfu is not None else None
    a, b = (mfu16, hfu16) if mfu16 is not None and hfu16 is not None else (mfu, hfu)
    if hfu is None or not mfu or abs(hfu / mfu - 1) * 100 <= MFU_NOTE_PCT:
        return None
    why = []
    if b is not None and a and abs(b / a - 1) * 100 > MFU_NOTE_PCT:
        why.append(f"the trace executed {b / a:.2f}× the convention's FLOPs")
    mixed = {d: p for d, p in (dtype_pct or {}).items() if p >= 1.0}
    if len(mixed) > 1:
        why.append("HFU holds each dtype's FLOPs to that dtype's peak (" + ", ".join(f"{d} {p:.0f}%" for d, p in mixed.items())
                   + "), MFU all of them to the GEMMs' dtype's")
    rec, frac = value(model, "recompute"), value(model, "recompute_fraction")
    if rec and rec != "none":
        why.append(f"{rec} recomputation re-ran {frac:.0%} of the forward's FLOPs (counted in HFU, not in MFU)")
    if (model or {}).get("causal_attention_pct"):
        why.append(f"the executed count halves causal attention ({model['causal_attention_pct']:.0f}% of the attention FLOPs "
                   "are causal), the convention counts it in full")
    if len(why) == (len(mixed) > 1):
        why.append("the executed count differs from the convention's 6·N + 6·L·h·(q + v)·s (attention backward at 2.5×, "
                   "biases, the head's and embedding's work)")
    return f"HFU {hfu:.1f}% vs MFU {mfu:.1f}%: " + "; ".join(why)


def model_tokens_per_s(model: dict, step_ms: float | None) -> float | None:
    """The job's tokens per second from the inferred model: global tokens per step / the job's step."""
    tokens = value(model, "global_tokens_per_step")
    if not tokens or not step_ms:
        return None
    return float(tokens) / (float(step_ms) / 1e3)
