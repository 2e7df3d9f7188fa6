"""What the efficiency rules share: the GPU is busy, but is it doing useful work fast? Each rule
(``workbench/diagnose/rules/``: fp32_matmul, unfused_elementwise, unfused_optimizer, attention_math,
layout_conversion, stale_gemm_kernels, low_mfu) reads analysis.kernel_classes.efficiency (kernel
classes, FLOPs, MFU) of GPU traces, in the profiled steps only (``EFFICIENCY_IN_STEPS``).

Impact test, shared by every rule but low_mfu: the estimated step time a fix saves,
as a share of the step, in ``IMPACT_BANDS``: info ≥ 5 %, warning ≥ 10 %, critical ≥ 20 % (the
bands of ``host_sync`` / ``dataloader_stall``, after xprof's "≥ 5 % moderately, ≥ 20 % highly
input-bound"). A problem that costs < 5 % of the step is not reported. Savings are roofline
estimates (upper bounds of what the one fix recovers), computed per rank next to the trace
(:func:`saved_frame`); the rank with the largest saving is reported (:func:`saving_diagnosis`).

``FLASH_FRACTION`` = 0.5: the share of the dtype's peak fused attention reaches (FlashAttention-2,
Dao 2023: 50–73 % of A100 peak forward; FlashAttention-3 reports up to 75 % on H100); fp32_matmul
and attention_math hold attention kernels to it.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pandas as pd

from workbench.analysis import frames
from workbench.analysis.frames import Frame, RankFrames
from workbench.analysis.kernel_classes import Efficiency, compact
from workbench.diagnose.base import Context, Diagnosis, gain, severity_for

IMPACT_BANDS = ((5.0, "info"), (10.0, "warning"), (20.0, "critical"))
IMPACT_LEVELS = "saving ≥ " + " / ".join(f"{t:g}" for t, _ in IMPACT_BANDS) + " % of step"
"""``IMPACT_BANDS`` as the rules' ``threshold`` (docs/diagnoses.md's rule table) writes them."""
FLASH_FRACTION = 0.5


def device(ctx: Context) -> tuple[str | None, int | None]:
    """Device name and compute capability major from the first rank's ``deviceProperties``."""
    for rf in ctx.ranks.values():
        return own_device(rf)
    return None, None


def own_device(rf: RankFrames) -> tuple[str | None, int | None]:
    for d in rf.devices:
        return d.get("name"), d.get("computeMajor")
    return None, None


def _in_steps(e: Efficiency, w: pd.DataFrame) -> Efficiency:
    """Only the profiled steps' kernel time: a host that ran ahead leaves earlier steps' kernels
    running at the start of the trace (114 ms of them on an fp32 run: its GEMMs filled "104 %")."""
    if w is None or not len(w):
        return e
    lo, hi = float(w["start_us"].min()), float(w["end_us"].max())
    k = e.kernels
    start, end = k["ts_us"].clip(lo, hi), (k["ts_us"] + k["dur_us"]).clip(lo, hi)
    keep = end > start
    return replace(e, kernels=k[keep].assign(dur_us=(end - start)[keep]))


def _efficiency_in_steps(rf: RankFrames) -> Efficiency:
    return _in_steps(rf[frames.EFFICIENCY], rf[frames.WINDOWS])


EFFICIENCY_IN_STEPS = Frame("efficiency_in_steps", _efficiency_in_steps, returns=Efficiency, compact=compact)
EFFICIENCY_READS = (frames.EFFICIENCY, EFFICIENCY_IN_STEPS, frames.WINDOWS)


def gpu_frames(ctx: Context) -> dict[int, tuple[Efficiency, int, float]]:
    """rank → (efficiency frames, profiled steps, mean step ms) for ranks that ran GPU kernels."""
    out = {}
    for r in ctx.ranks:
        if not ctx.rank_has_gpu(r):
            continue
        e = ctx.frame(frames.EFFICIENCY, r)
        steps = len(ctx.windows(r)) or 1
        b = ctx.breakdown[ctx.breakdown["rank"] == r]
        if e.kernels.empty or b.empty:
            continue
        out[r] = (ctx.frame(EFFICIENCY_IN_STEPS, r), steps, float(b["step_ms"].mean()))
    return out


def per_step_ms(k: pd.DataFrame, steps: int) -> float:
    """Milliseconds per step of the kernel rows ``k`` over ``steps`` profiled steps."""
    return float(k["dur_us"].sum()) / 1e3 / steps


def _saving(saved_of, rf: RankFrames):
    """``saved_of(efficiency in steps, steps, step ms, rf)`` of a rank that ran GPU kernels in its
    steps, else None: (evidence, saved ms per step) or None. Next to the trace (workbench.pipeline.reduce),
    where the kernel rows are."""
    if not rf.has_gpu:
        return None
    e, b = rf[frames.EFFICIENCY], rf[frames.BREAKDOWN]
    if e.kernels.empty or b.empty:
        return None
    return saved_of(rf[EFFICIENCY_IN_STEPS], len(rf[frames.WINDOWS]) or 1, float(b["step_ms"].mean()), rf)


def saved_frame(rid: str, saved_of) -> Frame:
    """Rule ``rid``'s per-rank saving as a frame ``saved:<rid>``: ``saved_of(efficiency in steps,
    steps, step ms, rf)`` → (evidence, saved ms per step) or None, a module-level function (frames
    travel to worker processes by reference)."""
    return Frame(f"saved:{rid}", partial(_saving, saved_of), returns=(tuple, list, type(None)))


def worst_rank(ctx: Context, saved: Frame) -> tuple[int, dict, float, float] | None:
    """The rank with the largest saving: (rank, evidence, saved ms per step, step ms)."""
    best = None
    for r, (e, steps, step_ms) in gpu_frames(ctx).items():
        found = ctx.frame(saved, r)
        if found is None:
            continue
        evidence, saved_ms = found
        if best is None or saved_ms / step_ms > best[2] / best[3]:
            best = (r, evidence, saved_ms, step_ms)
    return best


def saving_diagnosis(ctx, saved: Frame, title, recommendation, formula, fix) -> Diagnosis | None:
    """The Diagnosis of the rank whose fix saves the largest share of its step, in ``IMPACT_BANDS``
    (its id the frame's rule id); ``title(evidence, saved pct)`` writes its title."""
    rid = saved.name.removeprefix("saved:")
    w = worst_rank(ctx, saved)
    if w is None:
        return None
    r, evidence, saved_ms, step_ms = w
    pct = 100.0 * saved_ms / step_ms if step_ms > 0 else 0.0
    severity = severity_for(pct, IMPACT_BANDS)
    if severity is None:
        return None
    # shares the worker computed against the recorded step, as shares of the job's
    scale = ctx.to_job(r)
    evidence = {k: (round(v * scale, 2) if k.endswith("pct_of_step") and isinstance(v, (int, float)) else v)
                for k, v in evidence.items()}
    evidence = {**evidence, "saved_ms_per_step": round(saved_ms, 3), "step_ms": round(step_ms, 3), "rank": int(r)}
    return Diagnosis(id=rid, severity=severity, title=title(evidence, pct), evidence=evidence,
                     recommendation=recommendation, estimated_gain=gain(step_ms, saved_ms, formula), fix=fix, ranks=[int(r)])


def recompute_cost(model: dict, e: Efficiency, steps: int) -> dict | None:
    """What activation recomputation costs per step, from the model inferred from the trace: a
    share f of the forward's FLOPs re-run inside backward adds about f/(3 + f) to the forward and
    backward kernels (forward 1, backward 2, recomputation f; the elementwise work between the
    matmuls re-runs with them), at the rate the run's own kernels ran; the optimizer and the
    collectives are not re-run. Measured against the same run without recomputation: torchtitan's
    Llama 3B shape on an H200, full: 115 ms estimated, 114 ms measured; the engine's 1.3B GPT,
    full: 56 against 61 ms. A selective policy re-runs more elementwise work than its FLOP share
    says (torchtitan's per-op policy: 36 against 84 ms): a lower bound there. None when the run
    recomputes nothing (or the trace cannot say)."""
    from workbench.analysis.model import value

    rc, f = value(model, "recompute"), value(model, "recompute_fraction")
    if rc not in ("selective", "full") or not f or e.kernels.empty or steps < 1:
        return None
    k = e.kernels
    work_ms = float(k.loc[~k["class"].isin(NOT_RECOMPUTED), "dur_us"].sum()) / 1e3 / steps
    return {"recompute": rc, "recompute_fraction": round(float(f), 3), "recompute_ms": round(work_ms * f / (3 + f), 2)}


NOT_RECOMPUTED = ("optimizer", "communication", "copy")
"""Kernel classes that activation recomputation never re-runs."""


def where_time_goes(e: Efficiency, steps: int, breakdown: pd.DataFrame) -> dict[str, float]:
    """Share of the step (%) per kernel class, plus ``gpu_idle`` (host + idle + dataloader of the
    breakdown), largest first. Kernel classes can overlap each other (streams), so shares are of
    kernel time scaled to the busy part of the step."""
    step_ms = float(breakdown["step_ms"].mean()) if len(breakdown) else 0.0
    if step_ms <= 0:
        return {}
    idle = float((breakdown["host_ms"] + breakdown["idle_ms"] + breakdown["dataloader_ms"]).mean())
    by = e.kernels.groupby("class")["dur_us"].sum() / 1e3 / steps
    busy = max(step_ms - idle, 0.0)
    scale = busy / by.sum() if by.sum() > 0 else 0.0
    out = {str(c): round(100 * v * scale / step_ms, 1) for c, v in by.items()}
    out["gpu_idle"] = round(100 * idle / step_ms, 1)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))
