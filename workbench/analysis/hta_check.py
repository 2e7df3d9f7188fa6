"""Optional cross-check against Holistic Trace Analysis on GPU traces (never on ``analyze``'s path).

HTA (PyPI ``traceinsight``, ``import hta``) is strong at the GPU temporal and idle-time
breakdowns; we use it to check our own numbers, not to produce them: it is ~20× slower than
workbench's loader (benchmarks/analyze_vs_hta.py) and returns nothing useful on CPU-only traces.

Known difference: HTA recognises communication kernels by an ``ncclKernel`` regex, while NCCL ≥ 2.19
names them ``ncclDevKernel_*`` (HTA's GitHub tracker: #208, #247, #360). HTA then counts them as compute;
workbench's ``COMM_KERNEL`` pattern (analysis.steps) matches both. On such traces compare
``compute + non_compute`` (all kernel time) rather than compute alone.
"""

from __future__ import annotations

import pandas as pd

CHECK_COLUMNS = ["rank", "hta_compute_pct", "hta_non_compute_pct", "hta_idle_pct", "wb_compute_pct",
                 "wb_non_compute_pct", "wb_idle_pct", "compute_diff_pts", "idle_diff_pts"]


def hta_cross_check(trace_dir, breakdown: pd.DataFrame) -> pd.DataFrame:
    """HTA's temporal breakdown next to ours, per rank (CHECK_COLUMNS).

    ``breakdown`` is analysis.steps.run_breakdown of the same traces. Ours: compute = compute kernels;
    non-compute = communication + memcpy; idle = dataloader + host + idle (GPU idle), as shares
    of the profiled steps. HTA's span is its first to last kernel. Raises ImportError without HTA.
    """
    from hta.trace_analysis import TraceAnalysis  # optional dependency, slow import

    tb = TraceAnalysis(trace_dir=str(trace_dir)).get_temporal_breakdown(visualize=False)
    sums = breakdown.groupby("rank")[["step_ms", "compute_ms", "communication_ms", "memcpy_ms",
                                      "dataloader_ms", "host_ms", "idle_ms"]].sum()
    rows = []
    for _, h in tb.iterrows():
        r = int(h["rank"])
        if r not in sums.index:
            continue
        s = sums.loc[r]
        wb_c = 100.0 * s["compute_ms"] / s["step_ms"]
        wb_n = 100.0 * (s["communication_ms"] + s["memcpy_ms"]) / s["step_ms"]
        wb_i = 100.0 * (s["dataloader_ms"] + s["host_ms"] + s["idle_ms"]) / s["step_ms"]
        rows.append((r, float(h["compute_time_pctg"]), float(h["non_compute_time_pctg"]), float(h["idle_time_pctg"]),
                     wb_c, wb_n, wb_i, wb_c - float(h["compute_time_pctg"]), wb_i - float(h["idle_time_pctg"])))
    return pd.DataFrame(rows, columns=CHECK_COLUMNS)
