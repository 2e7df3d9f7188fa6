"""What fits, measured on the job's own model: the alternatives of ``out_of_memory`` and ``oom_risk``
from the capture's fake-tensor steps (``fake_step_rank{r}.json``, workbench.capture.fake_runner).

Each measured layout is an alternative on the job's own GPUs:

- **memory**: the fake step's peak (PyTorch's ``MemTracker`` over the job's model, optimizer and
  inputs): the allocated floor. Where the job measured its own allocated peak over a full step, the
  difference between that and the fake step of the job's layout is added to every alternative
  (the kernels' workspaces and buffers the fake step does not see); else it stands as measured.
- **step**: a roofline over the fake step's ops (workbench.capture.fake_tally): matmul and attention
  FLOPs at the device's dense peak for the compute dtype times the planner's efficiencies, every
  other op's bytes at its HBM bandwidth times the memory-bound efficiency, the optimizer's the same;
  a smaller micro-batch runs its forward and backward once per part of the batch and the optimizer
  once. The efficiencies are the run's own kernels' (``calibrate``) where it traced a GPU step, else
  the planner's stated defaults; where the job measured a steady step, every step is scaled by
  measured / roofline of the job's own layout. ``basis`` says which.

Offered: those that leave :data:`~workbench.calibration.alternatives.SAFE_HEADROOM` of the device
free, fastest first. Never offered: the job's own layout, a layout that recomputes less at an equal
or larger micro-batch than one that ran out of memory, or one predicted at the failed layout's
measured peak or more. The planner's alternatives on more GPUs follow (``source``: ``planner``).
"""

from __future__ import annotations

from typing import Any

from workbench.calibration.alternatives import SAFE_HEADROOM, advise
from workbench.pipeline.api import Extra
from workbench.pipeline.result import Result

GIB = float(1 << 30)
RECOMPUTE_RANK = {"none": 0, "selective-layer": 1, "partial": 1, "selective-op": 1, "selective": 1, "full": 2}
"""Recomputation, least first: a layout that recomputes less than one that ran out of memory, at the
same or a larger micro-batch, does not fit either."""
SOURCE = "fake-tensor measurement of the job's own model"


def roofline_ms(tally: dict, peak, dtype: str, eff, part: int = 1) -> tuple[float, str] | None:
    """The step's time from its op tally (see the module docstring), and how; None without a peak."""
    if peak is None or not peak.hbm_tb_s:
        return None
    flops_peak = (peak.tflops.get(dtype) or peak.tflops.get("bf16") or 0) * 1e12
    if flops_peak <= 0:
        return None
    hbm = peak.hbm_tb_s * 1e12

    def part_s(phases) -> float:
        g = sum(tally["gemm"][p]["flops"] for p in phases) / (flops_peak * eff.gemm)
        a = sum(tally["attention"][p]["flops"] for p in phases) / (flops_peak * eff.attention)
        m = sum(tally["memory"][p]["bytes"] for p in phases) / (hbm * eff.memory_bound)
        return g + a + m

    fb = part_s(("forward", "backward"))
    opt = sum(tally[c]["optimizer"]["bytes"] for c in ("gemm", "attention", "memory")) / (hbm * eff.optimizer)
    how = (f"{dtype} peak {flops_peak / 1e12:,.0f} TFLOP/s × {eff.gemm:.0%} (matmuls) / {eff.attention:.0%} (attention), "
           f"HBM {peak.hbm_tb_s:g} TB/s × {eff.memory_bound:.0%}")
    return (part * fb + opt) * 1e3, how


def _efficiencies(run_path, result: Result):
    """The run's own kernel rates where it traced a GPU step, else those of committed GPU runs
    (workbench.calibration.fake_efficiency); and words."""
    if result.efficiency is not None and result.run.has_gpu:
        try:
            from workbench.calibration.calibrate import calibrate

            eff = calibrate([run_path], results={str(run_path): result})
            if eff.source != "defaults":
                return eff, "the run's own kernels' rates"
        except Exception:
            pass
    from workbench.calibration.fake_efficiency import CALIBRATED, WORDS

    return CALIBRATED, WORDS


def _job_measured(result: Result) -> tuple[float | None, float | None]:
    """The job's steady step (ms) and allocated peak (bytes), where it measured them."""
    step, alloc = result.metrics.steady_step_ms, result.metrics.peak_allocated_gib
    return (float(step) if step else None), (float(alloc) * GIB if alloc else None)


def measured_alternatives(result: Result, run) -> dict[str, Any] | None:
    """``{"alternatives": [...], "rejected": [...], "job": {...}}`` from the run's fake-tensor steps,
    or None where it has none (see the module docstring)."""
    from workbench.hardware.peaks import device_peak

    doc = next((d.fake_step for _, d in sorted(run.ranks.items()) if isinstance(d.fake_step, dict)), None)
    launch = next((d.launch for _, d in sorted(run.ranks.items()) if isinstance(d.launch, dict)), None)
    if not doc:
        return None
    rows = [m for m in doc.get("measurements") or [] if isinstance(m, dict) and m.get("peak_bytes") and m.get("tally")]
    job = next((m for m in rows if m.get("layout") == "job"), None)
    if job is None:
        return None
    failure = next((d for d in result.diagnoses if d.id == "out_of_memory"), None)
    said = (failure.evidence or {}).get("capacity_gib") if failure is not None else None
    capacity = run.device_memory_bytes or doc.get("device_bytes") or (said * GIB if said else None)
    job_rc = job.get("recompute") or "none"
    job_mb = job.get("micro_batch") or 1
    peak = device_peak(run.device_name) if run.has_gpu or run.device_name else None
    dtype = _dtype(launch, job["tally"], getattr(run, "trainer", None))
    eff, eff_words = _efficiencies(run.path, result)
    step_ms, alloc = _job_measured(result)
    fields = {k: f.get("value") for k, f in (result.model.fields or {}).items() if isinstance(f, dict)}
    if _attention_missing(job["tally"], fields):
        rows = [{**m, "tally": with_model_attention(m["tally"], fields, m.get("recompute") or job.get("recompute"),
                                                    m.get("micro_batch") or job.get("micro_batch") or 1)}
                for m in rows]
        job = next(m for m in rows if m.get("layout") == "job")
        eff_words += ("; attention FLOPs from the model (causal, its layers, heads, head width and sequence: "
                      "the fake step's attention calls went uncounted)")
    job_rl = roofline_ms(job["tally"], peak, dtype, eff)
    scale = step_ms / job_rl[0] if step_ms and job_rl and not failure else None
    offset = alloc - job["peak_bytes"] if alloc and not failure else 0.0
    world = run.world_size or 1
    # the trainer the capture recognised (trainer_rank{r}.json), else the launch record's
    trainer = (getattr(run, "trainer", None) or {}).get("trainer") or (launch or {}).get("trainer")
    out, rejected = [], []
    for m in rows:
        if m is job:
            continue
        rc, mb, part = m.get("recompute") or job_rc, m.get("micro_batch") or job_mb, int(m.get("part") or 1)
        mem = float(m["peak_bytes"]) + offset
        rl = roofline_ms(m["tally"], peak, dtype, eff, part=1)
        step = None
        if rl is not None:
            micro = roofline_ms(m["tally"], peak, dtype, eff)[0]
            if part > 1:  # forward and backward once per part of the batch, the optimizer once
                opt_only = roofline_ms({**m["tally"], **_no_fb(m["tally"])}, peak, dtype, eff)[0]
                step = part * (micro - opt_only) + opt_only
            else:
                step = micro
            step = step * scale if scale else step
        why = _excluded(failure, job_rc, job_mb, rc, mb, mem, job, capacity)
        alt = {"change": _change(job_rc, job_mb, rc, mb, part), "gpus": world, "layout": f"dp {world}, micro-batch {mb}"
               + (f" × {part} accumulated" if part > 1 else "") + f", recompute {rc}",
               "settings": {"recompute": rc, "micro_batch": mb, "grad_accum": part},
               "step_ms": None if step is None else round(step, 1), "memory_gib": round(mem / GIB, 2),
               "capacity_gib": None if not capacity else round(capacity / GIB, 2),
               "headroom_pct": None if not capacity else round(100 * (1 - mem / capacity), 1),
               "speedup": None, "tight": False, "source": SOURCE,
               "line": _line(trainer, job_rc, job_mb, rc, mb, part),
               "basis": _basis(m, rl, eff_words, scale, offset, failure)}
        if why:
            alt["rejected"] = why
            rejected.append(alt)
            continue
        out.append(alt)
    ref = step_ms or (job_rl[0] if job_rl else None)
    for a in out:
        if a["step_ms"] and ref:
            a["speedup"] = round(ref / a["step_ms"], 3)
    out.sort(key=lambda a: (a["step_ms"] is None, a["step_ms"] or 0.0, -a["memory_gib"]))
    return {"alternatives": out, "rejected": rejected,
            "job": {"layout": f"recompute {job_rc}, micro-batch {job_mb}", "memory_gib": round(job["peak_bytes"] / GIB, 2),
                    "step_ms": None if not job_rl else round(job_rl[0], 1), "source": SOURCE}}


def _attention_missing(tally: dict, fields: dict) -> bool:
    """A transformer's fake step whose tally holds no attention call (a record of a capture whose
    FLOP formula rejected grouped-query attention)."""
    counted = sum(tally["attention"][p]["ops"] for p in ("forward", "backward"))
    return not counted and all(fields.get(k) for k in ("layers", "heads", "head_dim", "seq"))


def with_model_attention(tally: dict, fields: dict, recompute: str | None, micro_batch: int) -> dict:
    """``tally`` with causal attention's FLOPs from the model: 2·b·h·s²·d per layer forward (two
    matmuls, half the square), twice that backward, one forward more inside backward where the
    recomputation reruns attention (full; the attention-only selective)."""
    fwd = 2 * int(micro_batch) * fields["heads"] * fields["seq"] ** 2 * fields["head_dim"] * fields["layers"]
    bwd = 2 * fwd + (fwd if recompute in ("full", "selective") else 0)
    att = {"forward": {"flops": fwd, "bytes": 0, "ops": 0}, "backward": {"flops": bwd, "bytes": 0, "ops": 0},
           "optimizer": tally["attention"]["optimizer"]}
    return {**tally, "attention": att}


def _no_fb(tally: dict) -> dict:
    """The tally with forward and backward emptied (its optimizer part alone)."""
    z = {"flops": 0, "bytes": 0, "ops": 0}
    return {c: {"forward": z, "backward": z, "optimizer": tally[c]["optimizer"]} for c in ("gemm", "attention", "memory")}


def _dtype(launch: dict | None, tally: dict | None = None, trainer: dict | None = None) -> str:
    """The peak the step's matmuls run at: the dtype most of the fake step's matmul and attention
    FLOPs ran in (its ops' inputs: under autocast the autocast dtype); for a record without it, the
    autocast the launch record saw, the trainer's precision (the Hugging Face Trainer and Lightning
    enter autocast inside the model's forward, after the launch record looks), the parameters'."""
    by_op = (tally or {}).get("compute_dtypes") or {}
    d = max(by_op, key=by_op.get) if by_op else next(iter(((launch or {}).get("autocast") or {}).values()), None)
    if d is None:
        settings = (trainer or {}).get("settings") or (launch or {}).get("trainer_settings") or {}
        prec = settings.get("precision") if isinstance(settings, dict) else None
        d = {"bf16": "bfloat16", "fp16": "float16"}.get(str(prec))
    if d is None:
        by = ((launch or {}).get("model") or {}).get("params_by_dtype") or {}
        d = max(by, key=by.get) if by else "float32"
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "tf32"}.get(d, "bf16")


def _excluded(failure, job_rc: str, job_mb: int, rc: str, mb: int, mem: float, job: dict, capacity) -> str | None:
    """Why an alternative is not offered, or None."""
    if capacity and mem > (1 - SAFE_HEADROOM) * capacity:
        return (f"predicted {mem / GIB:.1f} GiB of {capacity / GIB:.1f}: less than {SAFE_HEADROOM:.0%} free"
                if mem <= capacity else f"predicted {mem / GIB:.1f} GiB: over the device's {capacity / GIB:.1f}")
    if failure is not None:
        if RECOMPUTE_RANK.get(rc, 1) <= RECOMPUTE_RANK.get(job_rc, 1) and mb >= job_mb:
            return f"recomputes no more than recompute {job_rc} at micro-batch {job_mb}, which ran out of memory"
        if mem >= float(job["peak_bytes"]):
            return "predicted at the failed layout's peak or more"
    return None


TRAINER_RECOMPUTE = {"none": "none", "selective-op": "selective", "full": "full"}
"""The fake step's recomputation modes in the trainers' settings (workbench.trainers.SETTINGS)."""


def _line(trainer: str | None, job_rc: str, job_mb: int, rc: str, mb: int, part: int) -> str:
    """The line(s) that set the alternative in the job's trainer (workbench.trainers), or plain PyTorch's."""
    from workbench import trainers

    out = []
    if rc != job_rc and rc in TRAINER_RECOMPUTE:
        out.append(trainers.line(trainer, "recompute", TRAINER_RECOMPUTE[rc]))
    if mb != job_mb:
        out.append(trainers.line(trainer, "micro_batch", mb))
        if part > 1:
            out.append(trainers.line(trainer, "grad_accum", part))
    return "; ".join(out)


def _change(job_rc: str, job_mb: int, rc: str, mb: int, part: int) -> str:
    words = []
    if rc != job_rc:
        words.append(f"recompute {rc} instead of {job_rc}")
    if mb != job_mb:
        words.append(f"micro-batch {mb} × {part} accumulation steps" if part > 1 else f"micro-batch {mb}")
    return ", ".join(words) or "the job's layout"


def _basis(m: dict, rl, eff_words: str, scale, offset: float, failure) -> str:
    parts = [f"memory: {SOURCE} ({m.get('seconds', 0):.1f} s; {m.get('loss', 'its loss')})"]
    if offset:
        parts.append(f"+ {offset / GIB:+.2f} GiB: the job's measured allocated peak less its own fake step's")
    if rl is None:
        parts.append("step: no device peak to time it on (a CPU run)")
    else:
        s = f"step: roofline over the fake step's ops at {rl[1]}, {eff_words}"
        if scale:
            s += f"; × {scale:.2f}, the job's measured step over the roofline of its own layout"
        elif failure is not None:
            s += "; not anchored on a measured step (the job failed before a steady step)"
        parts.append(s)
    return "; ".join(parts)


def with_measured(result: Result, run) -> Result:
    """``result`` whose ``out_of_memory`` and ``oom_risk`` findings answer with the measured
    alternatives first, the planner's on more GPUs after them."""
    ids = [d.id for d in result.diagnoses if d.id in ("out_of_memory", "oom_risk")]
    if not ids:
        return result
    found = measured_alternatives(result, run)
    if found is None:
        return result
    world = run.world_size or 1
    out = {}
    for d in result.diagnoses:
        if d.id not in ids:
            continue
        planner = [{**a, "source": "planner"} for a in (d.alternatives or ()) if a.get("gpus", world) > world]
        out[d.id] = [*found["alternatives"], *planner]
    return result.with_alternatives(out)


def _apply(analysed) -> Result:
    result = advise(analysed.result, analysed.path, analysed.analysis())
    return with_measured(result, analysed.analysis().run)


ALTERNATIVES = Extra("alternatives", _apply)
"""The planner's answers to a run's findings, and for memory findings the job's own model measured
first (workbench.calibration.alternatives.ALTERNATIVES, extended): what the CLI, the app and the
report show."""


__all__ = ["ALTERNATIVES", "measured_alternatives", "roofline_ms", "with_measured"]
