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


def dataloader_stall(breakdown: pd.DataFrame, run_config: dict | None = None) -> Diagnosis | None:
    if breakdown.empty:
        return None
    per_rank = breakdown.groupby("rank")[["step_ms", "dataloader_ms"]].mean()
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
            "source": "main-thread enumerate(DataLoader)#…__next__ while the device was idle",
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
