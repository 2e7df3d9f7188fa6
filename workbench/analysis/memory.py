"""Memory: the allocator timeline from ``[memory]`` events, peak vs capacity, growth, ZeRO estimate.

``profile_memory=True`` makes Kineto write one ``[memory]`` instant event per allocation/free
with the allocator's running ``Total Allocated`` / ``Total Reserved`` (``Device Type`` 1 = CUDA,
0 = CPU; CPU "reserved" is not a caching-allocator pool and is ignored for GPU figures).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.format import kineto
from workbench.analysis.intervals import str_mask
from workbench.analysis.flops import gpu_launches, op_flops
from workbench.analysis.steps import step_windows
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


STEP_TRANSIENT_COLUMNS = ["step", "transient_bytes"]


def step_transient(trace: Trace, windows: pd.DataFrame) -> pd.DataFrame:
    """Per profiled step: how far the CPU allocator's counter rose above its lowest point within the
    step (``[memory]`` events, device type 0) — what one step allocates and frees again. The counter
    sees only what was allocated inside the recorded window, so what lives between steps is not in
    it. Empty for traces without CPU memory events (recorded without ``profile_memory``).

    Columns: step, transient_bytes."""
    tl = memory_timeline(trace)
    cpu = tl[tl["device_type"] == 0]
    if cpu.empty or windows.empty:
        return pd.DataFrame(columns=STEP_TRANSIENT_COLUMNS)
    ts, alloc = cpu["ts_us"].to_numpy(), cpu["allocated_bytes"].to_numpy(float)
    rows = []
    for step, lo, hi in zip(windows["step"].to_numpy(), windows["start_us"].to_numpy(), windows["end_us"].to_numpy()):
        x = alloc[(ts >= lo) & (ts < hi)]
        if len(x):
            rows.append((int(step), float(x.max() - x.min())))
    return pd.DataFrame(rows, columns=STEP_TRANSIENT_COLUMNS)


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


# The autograd engine wraps every backward node in one of these (on CPU too, where backward runs
# on the caller's thread); activation-checkpointing recomputes happen inside them as well.
PARAM_COLUMNS = ["op", "weight_dims", "params"]


def weight_shapes(trace: Trace, windows: pd.DataFrame | None = None) -> pd.DataFrame:
    """The weights the first forward pass of the first profiled step multiplies by, from the GEMM
    and convolution ops' ``Input Dims`` (capture records shapes).

    One row per op: op, weight_dims (tuple), params (weight + bias elements). ``addmm(bias, x,
    W.t())`` and ``mm(x, W.t())`` give W as their last matrix; ``convolution(x, W, bias, …)`` its
    second and third inputs. ``bmm``/attention multiply activations, not weights, and are skipped.
    Only ops before the step's first backward node count, so each weight shows once per step even
    on CPU (backward on the same thread) and under gradient accumulation. Not seen: embeddings
    looked up by index (a tied output head counts them once), norms' scales, and weights no GEMM
    touches in the first micro-batch. Empty when the trace has no shapes or no step.
    """
    windows = step_windows(trace) if windows is None else windows
    if windows.empty:
        return pd.DataFrame(columns=PARAM_COLUMNS)
    lo_col, hi_col = ("host_start_us", "host_end_us") if "host_start_us" in windows else ("start_us", "end_us")
    first = windows.sort_values(lo_col).iloc[0]
    lo, hi = float(first[lo_col]), float(first[hi_col])
    ev = trace.events
    if "op_args" not in ev:
        return pd.DataFrame(columns=PARAM_COLUMNS)
    bwd = ev[str_mask(ev["name"], lambda c: c.str.startswith(kineto.BACKWARD_NODE)) & (ev["ts_us"] >= lo).to_numpy()
             & (ev["ts_us"] < hi).to_numpy()]
    fwd_end = float(bwd["ts_us"].min()) if not bwd.empty else hi
    ops = op_flops(trace, windows)
    # op_flops keeps only the outermost counted op (a CPU conv's inner addmm is not a second weight)
    ops = ops[(ops["ts_us"] >= lo) & (ops["ts_us"] < fwd_end) & ops["name"].isin(list(kineto.WEIGHT_OPS))]
    # a DataLoader's per-sample transform (num_workers=0) multiplies on the main thread too: its
    # matrices are data, not weights (traces/ddp_slow_data: 32 such 128×128 mm per step)
    dl = ev[str_mask(ev["name"], lambda c: c.str.match(kineto.DATALOADER.pattern))]
    if not dl.empty and not ops.empty:
        starts, ends = dl["ts_us"].to_numpy(), (dl["ts_us"] + dl["dur_us"]).to_numpy()
        ts = ops["ts_us"].to_numpy()
        i = np.searchsorted(starts, ts, side="right") - 1
        inside = (i >= 0) & (ts < np.maximum.accumulate(ends)[np.clip(i, 0, None)])
        ops = ops[~inside]
    if ev["is_gpu"].any() and not ops.empty:
        # on a GPU run a weight's GEMM launches a kernel; an op that launched none ran on the CPU
        ops = ops.reset_index(drop=True)
        ops = ops[ops.index.isin(gpu_launches(trace, ops)["op"])]
    keep = ev["op_args"].notna().to_numpy()
    args = dict(zip(zip(ev["ts_us"].to_numpy()[keep], np.asarray(ev["name"].array[keep], dtype=object)), ev["op_args"].to_numpy()[keep]))
    rows = []
    for ts, name in zip(ops["ts_us"], ops["name"]):
        dims = args[(ts, name)].dims
        if name == "aten::convolution":
            w, b = dims[1], dims[2] if len(dims) > 2 else []
        elif name == "aten::addmm":
            w, b = dims[2], dims[0]
        else:
            w, b = dims[1], []
        if len(w) < 2:
            continue
        rows.append({"op": name, "weight_dims": tuple(int(x) for x in w),
                     "params": int(np.prod(w)) + (int(np.prod(b)) if b and len(b) == 1 else 0)})
    return pd.DataFrame(rows, columns=PARAM_COLUMNS)


def count_params(trace: Trace, windows: pd.DataFrame | None = None) -> int | None:
    """Ψ, the parameters one rank's first forward pass multiplies by (:func:`weight_shapes`);
    None when the trace has no shapes. A lower bound: see weight_shapes for what it misses."""
    w = weight_shapes(trace, windows)
    return int(w["params"].sum()) if not w.empty else None


def allocator_summary(steps: pd.DataFrame | None, capacity_bytes: int | None) -> dict | None:
    """Peak device memory from the allocator's own statistics in ``steps_rank{r}.csv``
    (``max_mem_allocated_bytes``, ``max_mem_reserved_bytes``: peaks since the start) —
    what a run captured without per-event memory records has. The keys of :func:`memory_summary`
    (``growth_bytes_per_step`` from the allocated bytes at each step's end, over the steps from 1
    on), or None without those columns."""
    if steps is None or steps.empty or "max_mem_allocated_bytes" not in steps:
        return None
    alloc = pd.to_numeric(steps["max_mem_allocated_bytes"], errors="coerce").dropna()
    res = pd.to_numeric(steps.get("max_mem_reserved_bytes", pd.Series(dtype=float)), errors="coerce").dropna()
    if alloc.empty:
        return None
    peak = float(res.max()) if not res.empty else None
    out = {"device": "cuda", "capacity_bytes": capacity_bytes, "peak_allocated_bytes": float(alloc.max()),
           "peak_reserved_bytes": peak, "peak_reserved_pct": None, "headroom_gib": None,
           "allocated_at_peak_reserved_bytes": None, "growth_bytes_per_step": 0.0, "steps": int(len(steps)),
           "source": "allocator statistics per step (steps_rank{r}.csv max_mem_*_bytes)"}
    if peak is not None and capacity_bytes:
        out["peak_reserved_pct"] = 100.0 * peak / capacity_bytes
        out["headroom_gib"] = (capacity_bytes - peak) / GIB
    end = steps[steps["step"] >= 1] if "step" in steps else steps
    cur = pd.to_numeric(end.get("mem_allocated_bytes", pd.Series(dtype=float)), errors="coerce").dropna()
    if len(cur) >= 3:
        out["growth_bytes_per_step"] = float(np.polyfit(np.arange(len(cur), dtype=float), cur.to_numpy(float), 1)[0])
    return out

