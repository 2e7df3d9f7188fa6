"""Memory: the allocator timeline from ``[memory]`` events, peak vs capacity, growth, ZeRO estimate.

``profile_memory=True`` makes Kineto write one ``[memory]`` instant event per allocation/free
with the allocator's running ``Total Allocated`` / ``Total Reserved`` (``Device Type`` 1 = CUDA,
0 = CPU; CPU "reserved" is not a caching-allocator pool and is ignored for GPU figures).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.load.trace import Trace

GIB = float(1 << 30)
TIMELINE_COLUMNS = ["ts_us", "allocated_bytes", "reserved_bytes", "device_type"]
CUDA = 1


def memory_timeline(trace: Trace) -> pd.DataFrame:
    """Columns: ts_us (trace clock), allocated_bytes, reserved_bytes, device_type (0 CPU, 1 CUDA);
    sorted by time."""
    m = trace.memory
    if m.empty:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    return m[TIMELINE_COLUMNS].sort_values("ts_us", kind="stable", ignore_index=True)


def step_floors(timeline: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """Per step: the lowest and highest allocated bytes seen (CUDA samples), for growth.

    Columns: step, min_allocated_bytes, max_allocated_bytes, max_reserved_bytes, samples."""
    cuda = timeline[timeline["device_type"] == CUDA]
    cols = ["step", "min_allocated_bytes", "max_allocated_bytes", "max_reserved_bytes", "samples"]
    if cuda.empty or windows.empty:
        return pd.DataFrame(columns=cols)
    w = windows.sort_values("start_us")
    ts = cuda["ts_us"].to_numpy()
    i = np.searchsorted(w["start_us"].to_numpy(), ts, side="right") - 1
    ok = (i >= 0) & (ts < w["end_us"].to_numpy()[np.clip(i, 0, None)])
    c = cuda[ok].assign(step=w["step"].to_numpy()[i[ok]])
    g = c.groupby("step")
    out = pd.DataFrame({
        "min_allocated_bytes": g["allocated_bytes"].min(),
        "max_allocated_bytes": g["allocated_bytes"].max(),
        "max_reserved_bytes": g["reserved_bytes"].max(),
        "samples": g.size(),
    }).reset_index()
    return out[cols]


def memory_summary(trace: Trace, capacity_bytes: int | None, windows: pd.DataFrame | None = None) -> dict:
    """Peak device memory vs capacity for one rank.

    Keys: device ("cuda" or "none"), peak_allocated_bytes, peak_reserved_bytes, capacity_bytes,
    peak_reserved_pct (of capacity), headroom_gib (capacity − peak reserved), allocated_at_peak_
    reserved_bytes, growth_bytes_per_step (slope of each step's lowest allocated bytes: a leak
    or a growing cache shows here; 0 with fewer than 2 steps), steps.
    """
    tl = memory_timeline(trace)
    cuda = tl[tl["device_type"] == CUDA]
    out: dict = {"device": "cuda" if not cuda.empty else "none", "capacity_bytes": capacity_bytes,
                 "peak_allocated_bytes": None, "peak_reserved_bytes": None, "peak_reserved_pct": None,
                 "headroom_gib": None, "allocated_at_peak_reserved_bytes": None,
                 "growth_bytes_per_step": 0.0, "steps": 0}
    if cuda.empty:
        return out
    alloc, res = cuda["allocated_bytes"].to_numpy(), cuda["reserved_bytes"].to_numpy()
    at = int(np.argmax(res))
    out.update(peak_allocated_bytes=int(alloc.max()), peak_reserved_bytes=int(res.max()),
               allocated_at_peak_reserved_bytes=int(alloc[at]))
    if capacity_bytes:
        peak = max(int(res.max()), int(alloc.max()))
        out["peak_reserved_pct"] = 100.0 * peak / capacity_bytes
        out["headroom_gib"] = (capacity_bytes - peak) / GIB
    if windows is not None and len(windows) >= 2:
        floors = step_floors(tl, windows)
        out["steps"] = len(floors)
        if len(floors) >= 2:
            x = np.arange(len(floors), dtype=float)
            out["growth_bytes_per_step"] = float(np.polyfit(x, floors["min_allocated_bytes"].to_numpy(float), 1)[0])
    return out


def zero_model_states_bytes(n_params: int, dp: int, stage: int) -> int:
    """Bytes of model states per rank, mixed-precision Adam (ZeRO paper, Rajbhandari et al. 2020,
    §3/Fig. 1): fp16 params 2Ψ + fp16 grads 2Ψ + fp32 params, momentum, variance 12Ψ.

    stage 0 (plain DP) 16Ψ; 1 (optimizer states sharded) 4Ψ + 12Ψ/N_d; 2 (+ gradients)
    2Ψ + 14Ψ/N_d; 3 (+ parameters) 16Ψ/N_d. Activations, temporaries and fragmentation come on top.
    """
    psi, nd = float(n_params), float(max(dp, 1))
    if stage == 0:
        b = 16 * psi
    elif stage == 1:
        b = 4 * psi + 12 * psi / nd
    elif stage == 2:
        b = 2 * psi + 14 * psi / nd
    elif stage == 3:
        b = 16 * psi / nd
    else:
        raise ValueError(f"ZeRO stage must be 0..3, got {stage}")
    return int(round(b))
