"""The whole run's step history (``history_rank{r}.csv``, contract.HISTORY_COLUMNS): its change points,
per rank, and what each change came with.

The method (:data:`METHOD`) is ruptures' ``KernelCPD`` with the linear kernel — the least-squares
cost of piecewise-constant segments, searched by PELT (Killick et al., 2012) in ruptures' C code —
on the log of each rank's step time (a slowdown of 40 % is the same jump at 5 ms and at 5 s), after
a running median of :data:`SMOOTH_ROWS` rows (an isolated stalled step is no change). The penalty is
BIC's form, :data:`BETA` · σ² · ln n, with σ the series' noise from the median absolute deviation of
its successive differences (/√2: robust to the changes themselves). Segments hold at least
:data:`MIN_SIZE` rows. Each change is then placed on the raw series, within ±``MIN_SIZE/2`` rows,
where the least absolute deviation from the two sides' medians is smallest (a median is not moved by
a burst of slow steps next to the change). A change is reported when the medians of the steps on its
two sides differ by at least :data:`MIN_CHANGE_PCT`.

Ranks' changes within :data:`TOLERANCE_STEPS` of each other are one change of the job, with the
ranks that saw it. What came with it is read from the same steps on each rank: the DataLoader wait,
the training thread's CPU time, the GPU's SM clock, temperature and throttle reasons
(:func:`cause`). A straggler — one rank slower from step N — is the change whose cause is on that
rank only. Pure functions: DataFrames in, dicts out; no torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

METHOD = ("ruptures.KernelCPD(kernel='linear') (least squares, PELT search) on log(step_ms) after a running median "
          "of 5 rows; penalty 3·σ²·ln(n), σ = MAD of successive differences / √2; segments ≥ 20 rows; each change "
          "placed on the raw series by least absolute deviation within ±10 rows; reported when the medians of its "
          "two sides differ by ≥ 10 %")
SMOOTH_ROWS = 5
MIN_SIZE = 20
BETA = 3.0
MIN_CHANGE_PCT = 10.0
"""Smaller shifts are not reported: two runs of one configuration differ by a few per cent."""
WARMUP_ROWS = 3
"""The first rows (start-up, compilation) are no level of the run."""
TOLERANCE_STEPS = 10
"""Changes of several ranks this close are one change of the job."""
CAUSE_SHARE = 0.5
"""A series explains a change when it moved by at least this share of the step's change."""
CLOCK_DROP_PCT = 5.0
TEMP_RISE_C = 5.0
THROTTLE_IDLE = 0x1
"""NVML's "GPU idle" clock reason is no throttle; any other bit is (power, thermal, hardware slowdown)."""


def _num(df: pd.DataFrame, col: str) -> np.ndarray:
    if col not in df:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)


def clean(df: pd.DataFrame) -> pd.DataFrame:
    """A rank's history rows as the analysis reads them: by step, without the first rows and without
    the blocks the profiler recorded (its cost is no change of the job)."""
    if df is None or df.empty or "step_ms" not in df:
        return pd.DataFrame(columns=["first_step", "last_step", "steps", "step_ms"])
    out = df.copy()
    for c in out.columns:
        out[c] = pd.to_numeric(out[c], errors="coerce")
    out = out.dropna(subset=["first_step", "step_ms"]).sort_values("first_step").reset_index(drop=True)
    out = out.iloc[WARMUP_ROWS:]
    if "profiled" in out:
        out = out[out["profiled"].fillna(0) == 0]
    return out[out["step_ms"] > 0].reset_index(drop=True)


def noise(y: np.ndarray) -> float:
    """σ of a series from the median absolute deviation of its successive differences (/√2)."""
    if len(y) < 3:
        return 0.0
    d = np.diff(y)
    return float(np.median(np.abs(d - np.median(d))) * 1.4826 / np.sqrt(2))


def breakpoints(values: np.ndarray) -> list[int]:
    """Row indices where a new segment of ``values`` (positive) starts (see the module doc)."""
    import ruptures

    y = np.log(values)
    n = len(y)
    if n < 2 * MIN_SIZE:
        return []
    z = pd.Series(y).rolling(SMOOTH_ROWS, center=True, min_periods=1).median().to_numpy()
    pen = BETA * max(noise(y), 1e-3) ** 2 * np.log(n)
    found = ruptures.KernelCPD(kernel="linear", min_size=MIN_SIZE).fit(z.reshape(-1, 1)).predict(pen=pen)[:-1]
    return [place(y, b) for b in found]


def place(y: np.ndarray, b: int) -> int:
    """The split near ``b`` with the least absolute deviation from each side's median (raw series)."""
    n, half = len(y), MIN_SIZE // 2
    lo, hi = max(0, b - 2 * MIN_SIZE), min(n, b + 2 * MIN_SIZE)
    best, at = None, b
    for s in range(max(lo + 1, b - half), min(hi - 1, b + half) + 1):
        left, right = y[lo:s], y[s:hi]
        cost = float(np.abs(left - np.median(left)).sum() + np.abs(right - np.median(right)).sum())
        if best is None or cost < best:
            best, at = cost, s
    return at


def rank_changes(df: pd.DataFrame) -> list[dict[str, Any]]:
    """One rank's changes of step time: ``{step, row, before_ms, after_ms, change_pct}``."""
    rows = clean(df)
    if rows.empty:
        return []
    ms = rows["step_ms"].to_numpy(dtype=float)
    cuts = sorted(set(breakpoints(ms)))
    edges = [0, *cuts, len(ms)]
    out = []
    for i, b in enumerate(cuts):
        before, after = float(np.median(ms[edges[i]:b])), float(np.median(ms[b:edges[i + 2]]))
        pct = 100.0 * (after / before - 1.0)
        if abs(pct) >= MIN_CHANGE_PCT:
            out.append({"step": int(rows["first_step"].iloc[b]), "row": b, "before_ms": round(before, 3),
                        "after_ms": round(after, 3), "change_pct": round(pct, 1)})
    return out


def _window(rows: pd.DataFrame, col: str, step: int, lo: int | None, hi: int | None) -> tuple[float, float]:
    """Medians of ``col`` over the steps [lo, step) and [step, hi)."""
    s, v = rows["first_step"].to_numpy(), _num(rows, col)
    lo = -1 if lo is None else lo
    hi = np.inf if hi is None else hi
    a, b = v[(s >= lo) & (s < step)], v[(s >= step) & (s < hi)]
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    return (float(np.median(a)) if len(a) else np.nan), (float(np.median(b)) if len(b) else np.nan)


def cause(ranks: dict[int, pd.DataFrame], step: int, lo: int | None, hi: int | None, delta_ms: float) -> dict[str, Any]:
    """What moved with the step time at ``step`` (steps [lo, step) against [step, hi)), on which ranks:
    ``{kind: data_wait | host_cpu | gpu_clocks | rank | unknown, ranks, detail}``."""
    moved: dict[str, dict[int, tuple[float, float]]] = {"data_wait_ms": {}, "cpu_ms": {}, "sm_clock_mhz": {},
                                                        "gpu_temp_c": {}, "step_ms": {}}
    throttled = []
    for r, rows in ranks.items():
        for col in moved:
            a, b = _window(rows, col, step, lo, hi)
            if a == a and b == b:
                moved[col][r] = (a, b)
        if "throttle_reasons" in rows:
            t = rows[rows["first_step"] >= step]["throttle_reasons"].dropna().astype(int)
            if len(t) and (int(np.bitwise_or.reduce(t.to_numpy())) & ~THROTTLE_IDLE):
                throttled.append(r)
    need = CAUSE_SHARE * abs(delta_ms)
    data = sorted(r for r, (a, b) in moved["data_wait_ms"].items() if (b - a) * np.sign(delta_ms) >= need and need > 0)
    if data:
        d = {r: round(moved["data_wait_ms"][r][1] - moved["data_wait_ms"][r][0], 3) for r in data}
        return {"kind": "data_wait", "ranks": data, "detail": {"data_wait_delta_ms": d}}
    clock = sorted(r for r, (a, b) in moved["sm_clock_mhz"].items() if a > 0 and 100 * (a - b) / a >= CLOCK_DROP_PCT)
    hot = sorted(r for r, (a, b) in moved["gpu_temp_c"].items() if b - a >= TEMP_RISE_C)
    if clock or throttled:
        rs = sorted(set(clock) | set(throttled))
        return {"kind": "gpu_clocks", "ranks": rs,
                "detail": {"sm_clock_mhz": {r: [round(x, 1) for x in moved["sm_clock_mhz"][r]] for r in rs
                                            if r in moved["sm_clock_mhz"]},
                           "gpu_temp_c": {r: [round(x, 1) for x in moved["gpu_temp_c"][r]] for r in rs
                                          if r in moved["gpu_temp_c"]},
                           "throttled_ranks": throttled, "hotter_ranks": hot}}
    cpu = sorted(r for r, (a, b) in moved["cpu_ms"].items() if (b - a) * np.sign(delta_ms) >= need and need > 0)
    if cpu and len(cpu) < len(ranks):
        d = {r: round(moved["cpu_ms"][r][1] - moved["cpu_ms"][r][0], 3) for r in cpu}
        return {"kind": "host_cpu", "ranks": cpu, "detail": {"cpu_delta_ms": d}}
    steps = {r: b - a for r, (a, b) in moved["step_ms"].items()}
    if len(steps) > 1:
        slow = sorted(r for r, d in steps.items() if d * np.sign(delta_ms) >= need and need > 0)
        if slow and len(slow) < len(steps):
            return {"kind": "rank", "ranks": slow, "detail": {"step_delta_ms": {r: round(steps[r], 3) for r in slow}}}
    return {"kind": "unknown", "ranks": [], "detail": {}}


def summarise(histories: dict[int, pd.DataFrame]) -> dict[str, Any] | None:
    """The ``history`` block of ``workbench analyze --json`` (docs/analyze.md), or None without history."""
    ranks = {r: clean(df) for r, df in sorted(histories.items()) if df is not None and len(df)}
    ranks = {r: df for r, df in ranks.items() if not df.empty}
    if not ranks:
        return None
    raw = {r: df for r, df in histories.items() if df is not None and len(df)}
    last = max(int(pd.to_numeric(df["last_step"], errors="coerce").max()) for df in raw.values())
    try:
        per_rank = {r: rank_changes(df) for r, df in ranks.items()}
        missing = None
    except ImportError as e:  # a source checkout without the dependencies installed: the history still shows
        per_rank, missing = {}, f"change points not searched: {e.name or 'ruptures'} is not installed (pip install ruptures)"
    points: list[dict[str, Any]] = []
    for r, changes in per_rank.items():
        for c in changes:
            near = next((p for p in points if abs(p["step"] - c["step"]) <= TOLERANCE_STEPS
                         and np.sign(p["change_pct"]) == np.sign(c["change_pct"])), None)
            if near is None:
                points.append({**c, "ranks": [r], "_all": [c]})
            else:
                near["ranks"].append(r)
                near["_all"].append(c)
    points.sort(key=lambda p: p["step"])
    for i, p in enumerate(points):
        allc = p.pop("_all")
        p.pop("row", None)
        p["step"] = int(np.median([c["step"] for c in allc]))
        p["before_ms"] = round(float(np.median([c["before_ms"] for c in allc])), 3)
        p["after_ms"] = round(float(np.median([c["after_ms"] for c in allc])), 3)
        p["change_pct"] = round(100.0 * (p["after_ms"] / p["before_ms"] - 1.0), 1)
        lo = points[i - 1]["step"] if i else None
        hi = points[i + 1]["step"] if i + 1 < len(points) else None
        p["cause"] = cause(ranks, p["step"], lo, hi, p["after_ms"] - p["before_ms"])
    all_ms = np.concatenate([df["step_ms"].to_numpy(dtype=float) for df in ranks.values()])
    cap = np.concatenate([_num(df, "capture_ms") for df in ranks.values()])
    cap = cap[~np.isnan(cap)]
    return {
        "ranks": sorted(raw),
        "steps": last + 1,
        "rows": int(sum(len(df) for df in raw.values())),
        "aggregated": any(pd.to_numeric(df["steps"], errors="coerce").max() > 1 for df in raw.values()),
        "step_ms": {"median": round(float(np.median(all_ms)), 3), "p10": round(float(np.percentile(all_ms, 10)), 3),
                    "p90": round(float(np.percentile(all_ms, 90)), 3)},
        "per_rank": [{"rank": r, "median_ms": round(float(df["step_ms"].median()), 3), "steps": int(df["last_step"].max()) + 1}
                     for r, df in ranks.items()],
        "capture_ms_per_step": round(float(np.median(cap)), 4) if len(cap) else None,
        "method": METHOD,
        "change_points": points,
        **({"note": missing} if missing else {}),
    }


def series(histories: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """Every rank's rows in one frame (``rank`` column), by step: what the History page draws."""
    parts = []
    for r, df in sorted(histories.items()):
        if df is None or df.empty:
            continue
        d = df.copy()
        for c in d.columns:
            d[c] = pd.to_numeric(d[c], errors="coerce")
        parts.append(d.assign(rank=r))
    return pd.concat(parts, ignore_index=True).sort_values(["rank", "first_step"]) if parts else pd.DataFrame()


def history_json(histories: dict[int, pd.DataFrame], manifest: dict) -> dict[str, Any] | None:
    """The ``history`` block of ``workbench analyze``: :func:`summarise` of the ranks' histories
    (``history_rank{r}.csv``), and the capture's cost as the ranks measured it (their status in
    ``manifest``); None for a run without history."""
    out = summarise(histories)
    if out is None:
        return None
    ranks = manifest.get("ranks") if isinstance(manifest.get("ranks"), dict) else {}
    costs = [info["history"].get("cost_us_per_step") for info in ranks.values()
             if isinstance(info, dict) and isinstance(info.get("history"), dict)]
    costs = [c for c in costs if isinstance(c, (int, float))]
    cost = max(costs) if costs else None
    median = out["step_ms"]["median"]
    out["cost"] = {"us_per_step": cost, "pct_of_step": round(cost / 1e3 / median * 100.0, 4) if cost and median else None,
                   "source": "the ranks' own measure of the history's work per step (status_rank{r}.json), the "
                             "largest; benchmarks/history_cost.py measures it against the job run without capture"}
    return out
