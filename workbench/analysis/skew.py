"""Cross-rank skew: which rank is slow, and at what.

In synchronous data parallel training every rank ends a step together (the gradient all-reduce
waits for the slowest), so step time alone cannot name the straggler: the fast ranks show the
difference as communication (waiting inside the collective). The straggler is the rank with the
most *work* — step time minus communication — and its excess over the others is what it costs.
"""

from __future__ import annotations

import pandas as pd

SKEW_COLUMNS = ["rank", "steps", "step_ms", "compute_ms", "dataloader_ms", "work_ms",
                "step_ratio", "compute_ratio", "dataloader_ratio", "work_ratio", "work_excess_ms"]


def rank_skew(breakdown: pd.DataFrame) -> pd.DataFrame:
    """Per rank, means per step and ratios to the median rank.

    Columns: rank, steps, step_ms, compute_ms, dataloader_ms, work_ms (= step_ms −
    communication_ms: everything but waiting on others), step_ratio, compute_ratio,
    dataloader_ratio, work_ratio (each = this rank / median over ranks; 1.0 when the median is
    0), work_excess_ms (work_ms − the median of the *other* ranks' work_ms; 0 with one rank).
    """
    if breakdown.empty:
        return pd.DataFrame(columns=SKEW_COLUMNS)
    b = breakdown.assign(work_ms=breakdown["step_ms"] - breakdown["communication_ms"])
    g = b.groupby("rank")
    out = g[["step_ms", "compute_ms", "dataloader_ms", "work_ms"]].mean()
    out.insert(0, "steps", g.size())
    for c in ("step", "compute", "dataloader", "work"):
        med = out[f"{c}_ms"].median()
        out[f"{c}_ratio"] = out[f"{c}_ms"] / med if med > 0 else 1.0
    work = out["work_ms"]
    out["work_excess_ms"] = [float(work[r] - work.drop(r).median()) if len(work) > 1 else 0.0 for r in work.index]
    return out.reset_index()[SKEW_COLUMNS]
