"""``dataloader_stall``: the device waits on input.

Signal: per step, the time attributed to ``dataloader`` in the step breakdown — the main thread
inside ``DataLoader.__next__`` while the device has nothing else to do (on GPU traces: no kernel
running; on CPU traces: the main thread itself). Share = that time / step time, mean over ranks.

Thresholds (share of step time):
- info ≥ 5 %: the PyTorch TensorBoard plugin's recommendation trigger, xprof's "moderately
  input-bound".
- warning ≥ 10 %: TraceML's warning level.
- critical ≥ 20 %: xprof's "highly input-bound", TraceML's critical level.
Also at least 2 ms per step (TraceML's floor): below that the share is noise on tiny steps.

Two readings, the larger wins (evidence keeps both):
- the profiled steps, from the trace (``trace_share_pct``);
- every unprofiled step after the first, from ``steps_rank{r}.csv``'s ``data_wait_ms``
  (``run_share_pct``). A handful of profiled steps can miss a loader that stalls in bursts
  (N workers finishing N batches at once, then a long wait): the whole run cannot.

Estimated gain (upper bound): hiding all waiting saves ``dataloader_ms`` per step, so
speed-up ≤ step_ms / (step_ms − dataloader_ms).
"""

from __future__ import annotations

import pandas as pd

from workbench.diagnose.base import Diagnosis, severity_for

INFO_PCT = 5.0
WARNING_PCT = 10.0
CRITICAL_PCT = 20.0
MIN_MS_PER_STEP = 2.0
BANDS = ((INFO_PCT, "info"), (WARNING_PCT, "warning"), (CRITICAL_PCT, "critical"))


def run_wait(steps: dict | None) -> pd.DataFrame:
    """Per rank, mean step_ms and data_wait_ms over unprofiled steps after step 0 (steps CSVs)."""
    rows = {}
    for rank, df in (steps or {}).items():
        if df is None or not {"step", "step_ms", "data_wait_ms", "profiled"} <= set(df.columns):
            continue
        d = df[(df["step"] >= 1) & (df["profiled"] == 0)].dropna(subset=["step_ms", "data_wait_ms"])
        if len(d) >= 3:
            rows[int(rank)] = {"step_ms": float(d["step_ms"].mean()), "dataloader_ms": float(d["data_wait_ms"].mean())}
    return pd.DataFrame.from_dict(rows, orient="index", columns=["step_ms", "dataloader_ms"])


def dataloader_stall(breakdown: pd.DataFrame, run_config: dict | None = None, steps: dict | None = None) -> Diagnosis | None:
    if breakdown.empty:
        return None
    per_rank = breakdown.groupby("rank")[["step_ms", "dataloader_ms"]].mean()
    trace_share = 100.0 * per_rank["dataloader_ms"].mean() / per_rank["step_ms"].mean()
    whole = run_wait(steps)
    run_share = 100.0 * whole["dataloader_ms"].mean() / whole["step_ms"].mean() if not whole.empty else None
    source = "main-thread enumerate(DataLoader)#…__next__ while the device was idle (profiled steps)"
    if run_share is not None and run_share > trace_share:
        per_rank = whole
        source = "DataLoader __next__ wait per step in steps_rank{r}.csv (every unprofiled step after the first)"
    per_rank["share_pct"] = 100.0 * per_rank["dataloader_ms"] / per_rank["step_ms"]
    step_ms = float(per_rank["step_ms"].mean())
    dl_ms = float(per_rank["dataloader_ms"].mean())
    share = 100.0 * dl_ms / step_ms if step_ms > 0 else 0.0
    severity = severity_for(share, BANDS)
    if severity is None or dl_ms < MIN_MS_PER_STEP:
        return None
    ranks = [int(r) for r, row in per_rank.iterrows() if row["share_pct"] >= INFO_PCT]
    workers = (run_config or {}).get("data", {}).get("num_workers")
    advice = "raise DataLoader num_workers"
    if workers is not None:
        advice += f" (now {workers})"
    recommendation = (
        f"{advice}, keep workers alive (persistent_workers=True) with prefetch_factor ≥ 2, "
        "pin_memory=True on GPUs; if per-sample work is still too slow, preprocess once and "
        "preload the data into shared memory"
    )
    saved_pct = share
    return Diagnosis(
        id="dataloader_stall",
        severity=severity,
        title=f"DataLoader waits {share:.0f}% of each step ({dl_ms:.1f} ms of {step_ms:.1f} ms)",
        evidence={
            "dataloader_ms_per_step": round(dl_ms, 3),
            "step_ms": round(step_ms, 3),
            "share_pct": round(share, 2),
            "per_rank_share_pct": {int(r): round(float(v), 2) for r, v in per_rank["share_pct"].items()},
            "steps": int(breakdown["step"].nunique()),
            "trace_share_pct": round(float(trace_share), 2),
            "run_share_pct": None if run_share is None else round(float(run_share), 2),
            "source": source,
        },
        recommendation=recommendation,
        estimated_gain={
            "step_time_saved_pct": round(saved_pct, 1),
            "speedup_max": round(step_ms / max(step_ms - dl_ms, 1e-9), 2),
            "formula": "step_ms / (step_ms - dataloader_ms)",
        },
        fix=["data.num_workers", "data.prefetch_factor", "data.persistent_workers", "data.pin_memory", "data.preload_shm"],
        ranks=ranks,
    )
