"""The headline numbers of a run and small derived tables, shared by the app and the HTML report.

No streamlit here (the report imports it). The numbers come from the run's result
(workbench.pipeline.result.Result: what every command prints), the per-rank tables from its
:class:`Analysis` (the frames behind it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from workbench.analysis import frames
from workbench.analysis.steps import CATEGORIES
from workbench.format.overhead import describe
from workbench.hardware.peaks import device_peak
from workbench.pipeline.result import Result
from workbench.pipeline.verdict import Analysis
from workbench.present.tables import rounded


@dataclass(slots=True)
class Headline:
    step_ms: float | None
    gpu_busy_pct: float | None
    """Share of the step the device is busy: GPU kernels/copies, or on CPU runs the main thread's
    compute (``compute_busy_pct``)."""
    mfu_pct: float | None
    """Model FLOPs utilisation: ``efficiency.mfu_pct`` of ``workbench analyze --json`` (the step's
    FLOPs, counted from the ops' shapes, at the device's dense peak per dtype ÷ step time)."""
    exposed_comm_pct: float | None
    """Communication not hidden by compute, share of the step (the breakdown's category)."""
    peak_memory_bytes: int | None
    capacity_bytes: int | None
    memory_kind: str
    """"GPU allocated" or "host RSS"."""
    step_words: str = ""
    """Which steps ``step_ms`` is the mean of, in the words of ``summary.steps_covered`` (the CLI's
    table title): the job's step, one definition everywhere."""
    capture_line: str | None = None
    """What the capture cost, the CLI's line (workbench.format.overhead.describe), or None."""


def peak_memory(analysis: Analysis) -> tuple[dict[int, int], str]:
    """Peak memory per rank: GPU allocated ([memory] events, else steps.csv), else the host RSS."""
    run = analysis.run
    out: dict[int, int] = {}
    mems = analysis.per_rank_frames(frames.MEMORY_SUMMARY)
    for r, d in run.ranks.items():
        mem = mems.get(r)
        if mem is not None and mem["peak_allocated_bytes"] is not None:
            out[r] = int(mem["peak_allocated_bytes"])
        elif d.steps is not None and "max_mem_allocated_bytes" in d.steps and d.steps["max_mem_allocated_bytes"].notna().any():
            out[r] = int(d.steps["max_mem_allocated_bytes"].max())
    if out or run.has_gpu:  # a GPU run that recorded no allocator figures: its host's RSS is not its memory
        return out, "GPU allocated"
    for r, d in run.ranks.items():
        for f in (d.steps, d.nvml):
            if f is not None and "rss_bytes" in f and f["rss_bytes"].notna().any():
                out[r] = max(out.get(r, 0), int(f["rss_bytes"].max()))
    return out, "host RSS"


def mfu_pct(result: Result) -> float | None:
    """The run's MFU, as ``workbench analyze --json`` reports it (``efficiency.mfu_pct``): the one
    MFU of the CLI, the app and the report."""
    return result.efficiency.mfu_pct if result.efficiency else None


def evidence_text(value) -> str:
    """An evidence value as ``--json`` prints it (``4.3``, ``{"0": 12.5}``; never ``np.float64(4.3)``),
    a lone float to three significant digits (``0.9388`` reads 0.939: no figure of a rule is that exact), a
    large number with its thousands separated (``12,582,912,000,000``, not fourteen digits to count)."""
    import json

    if isinstance(value, float) and math.isfinite(value) and value != 0 and not value.is_integer():
        digits = max(0, 2 - math.floor(math.log10(abs(value))))
        return f"{value:,.{digits}f}" if abs(value) < 1e15 else json.dumps(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and abs(value) >= 10_000:
        return f"{value:,.0f}"
    return value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)


def headline(result: Result, analysis: Analysis) -> Headline:
    """The Overview's numbers: the result's metrics (what ``workbench compare`` diffs), plus the
    host-RSS peak on CPU runs (``analysis``' steps and NVML rows)."""
    m = result.metrics
    peaks, kind = peak_memory(analysis)
    peak = m.peak_allocated_gib
    busy = m.gpu_busy_pct if result.run.has_gpu else m.compute_busy_pct
    return Headline(
        step_ms=m.step_ms,
        gpu_busy_pct=None if busy is None else float(busy),
        mfu_pct=mfu_pct(result),
        exposed_comm_pct=m.exposed_comm_pct if "exposed_comm_pct" in m.keys else m.communication_pct,
        peak_memory_bytes=int(peak * 2**30) if peak else (max(peaks.values()) if peaks else None),
        capacity_bytes=analysis.run.device_memory_bytes if kind == "GPU allocated" else None,
        memory_kind=kind,
        step_words=result.summary.steps_covered or "",
        capture_line=describe(result.summary.capture_overhead),
    )


def per_rank_table(analysis: Analysis) -> pd.DataFrame:
    """Each rank's profiled steps, its step (the job's, as ``summary.step_ms``) and the ms of every
    category some rank spends time in (analysis.per_rank; the shares are the Overview's bars), plus
    its peak memory (GiB): few enough columns for a 1280-pixel window, rounded
    (present.tables.rounded)."""
    t = analysis.per_rank
    peaks, kind = peak_memory(analysis)
    out = pd.DataFrame({"rank": t["rank"].astype(int), "profiled steps": t["steps"].astype(int),
                        "step (ms)": t["step_ms"]})
    for c in CATEGORIES:
        if f"{c}_ms" in t and (t[f"{c}_ms"] > 0).any():
            out[f"{c} (ms)"] = t[f"{c}_ms"]
    out[f"peak {'GPU' if kind == 'GPU allocated' else 'RSS'} (GiB)"] = [peaks.get(int(r), math.nan) / 2**30 for r in t["rank"]]
    return rounded(out)


def time_range(analysis: Analysis, ranks: list[int] | None) -> dict | None:
    """Where a diagnosis applies: its ranks' profiled steps and their span on the trace clock (µs)."""
    b = analysis.breakdown
    if b.empty:
        return None
    if ranks:
        b = b[b["rank"].isin(ranks)]
    if b.empty:
        return None
    return {"ranks": sorted(int(r) for r in b["rank"].unique()), "steps": [int(b["step"].min()), int(b["step"].max())],
            "start_us": float(b["start_us"].min()), "end_us": float(b["end_us"].max()),
            "span_ms": round(float(b["end_us"].max() - b["start_us"].min()) / 1e3, 1)}


def gain_key(d) -> float:
    """Sort key: estimated share of step time saved (then the speed-up bound)."""
    g = d.estimated_gain or {}
    return float(g.get("step_time_saved_pct") or 0.0) + 1e-3 * float(g.get("speedup_max") or 0.0)


def sorted_by_gain(diagnoses) -> list:
    return sorted(diagnoses, key=gain_key, reverse=True)


def model_states_table(n_params: int, stages=(0, 1, 2, 3), dps=(1, 2, 4, 8, 16), activations_bytes: int = 0,
                       states_fn=None) -> pd.DataFrame:
    """Memory per GPU for each ZeRO stage × data-parallel size: model states (``states_fn``,
    analysis.memory.zero_model_states_bytes) plus the measured activations.
    Columns: stage, dp, model_states_bytes, activations_bytes, total_bytes."""
    rows = [{"stage": s, "dp": d, "model_states_bytes": int(states_fn(n_params, d, s)), "activations_bytes": int(activations_bytes)}
            for d in dps for s in stages]
    t = pd.DataFrame(rows)
    t["total_bytes"] = t["model_states_bytes"] + t["activations_bytes"]
    return t


def activations_bytes(memory: pd.DataFrame, windows: pd.DataFrame) -> int:
    """Measured activations: the largest rise of allocated memory within a step over its level at
    the step's start (model states are resident at a step boundary; activations come and go)."""
    if memory is None or memory.empty or windows.empty:
        return 0
    best = 0
    ts = memory["ts_us"].to_numpy()
    alloc = memory["allocated_bytes"].to_numpy()
    for lo, hi in zip(windows["start_us"], windows["end_us"]):
        m = (ts >= lo) & (ts <= hi)
        if m.any():
            a = alloc[m]
            best = max(best, int(a.max() - a[0]))
    return best


def top_kernels(kernels: pd.DataFrame, device_name: str | None, n: int = 20) -> pd.DataFrame:
    """The kernels that took the most GPU time, by name, over all ranks.

    ``kernels``: analysis.kernel_classes.kernel_table rows (of every rank). Columns: kernel,
    class, subclass, dtype, calls, time_ms, time_pct (of all GPU event time), tflops_per_s,
    pct_of_peak (compute classes: the FLOPs attributed to the kernel at its dtype's dense peak
    (fp32 SIMT for gemm_simt) over its time; None where it counts no FLOPs or the device is unknown).
    """
    cols = ["kernel", "class", "subclass", "dtype", "calls", "time_ms", "time_pct", "tflops_per_s", "pct_of_peak"]
    if kernels.empty:
        return pd.DataFrame(columns=cols)
    peak = device_peak(device_name)
    kernels = kernels.assign(calls=kernels["calls"] if "calls" in kernels else 1)  # compact tables count calls
    g = kernels.groupby("name", sort=False, observed=True)
    t = pd.DataFrame({"class": g["class"].first(), "subclass": g["subclass"].first(), "dtype": g["dtype"].first(),
                      "calls": g["calls"].sum(), "time_ms": g["dur_us"].sum() / 1e3, "flops": g["flops"].sum()})
    t = t.sort_values("time_ms", ascending=False).head(n).reset_index(names="kernel")
    t["time_pct"] = 100.0 * t["time_ms"] / (kernels["dur_us"].sum() / 1e3)
    secs = t["time_ms"] / 1e3
    t["tflops_per_s"] = [f / s / 1e12 if f > 0 and s > 0 else None for f, s in zip(t["flops"], secs)]

    def pct(row, s):
        d = "fp32" if row["class"] == "gemm_simt" else row["dtype"]
        p = peak.tflops.get(d) if peak and d else None
        return 100.0 * row["flops"] / (p * 1e12) / s if p and row["flops"] > 0 and s > 0 else None

    t["pct_of_peak"] = [pct(r, s) for r, s in zip(t.to_dict("records"), secs)]
    return t[cols]
