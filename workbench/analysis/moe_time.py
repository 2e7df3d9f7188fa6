"""Where a mixture of experts' step goes: expert GEMMs, routing, token dispatch and combine.

Each op is put in a role by what it is and where it runs (``ROLE_OPS``):

- ``expert_gemm`` — ``aten::_grouped_mm`` (every expert's rows in one call) forward and backward
  (``GroupedMmBackward0``); a per-expert loop's GEMMs are the ``aten::mm``/``aten::addmm`` inside a
  block with experts that saw fewer rows than the block's tokens;
- ``routing`` — the router's scores, top-k and tokens per expert: ``aten::topk``, ``aten::histc``,
  ``aten::bincount``, ``aten::sort``/``argsort``, ``aten::one_hot``, ``aten::cumsum``,
  ``aten::softmax``/``sigmoid`` inside a block with experts, and their backward nodes;
- ``dispatch`` — moving token rows to their experts and back: ``aten::index``/``index_select``
  (gather), ``aten::index_add_``/``index_put_``/``scatter_add_``/``scatter_``/``gather``, inside a
  block with experts, and their backward nodes. Expert parallelism's all-to-all is communication
  (analysis.comm), not here.

A block with experts runs from its router (the first routing op after an attention forward) to
the next attention forward or the end of the forward pass; backward nodes are taken by name
(``autograd::engine::evaluate_function: IndexBackward0`` …) in a run whose model has experts.
Outermost wins: an op inside another op of a role counts once, with that role.

On a GPU trace a role's time is its ops' kernels' (launched from the op's span on its thread:
analysis.flops.gpu_launches); on a CPU trace the ops' own time.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from workbench.analysis.flops import ATTENTION, gpu_launches
from workbench.analysis.intervals import str_mask, str_values
from workbench.format import kineto
from workbench.load.trace import Trace

MOE_COLUMNS = ["step", "step_ms", "expert_gemm_ms", "routing_ms", "dispatch_ms", "source"]
ROLES = ("expert_gemm", "routing", "dispatch")

ROUTING_OPS = frozenset({"aten::topk", "aten::histc", "aten::bincount", "aten::sort", "aten::argsort", "aten::one_hot",
                         "aten::cumsum", "aten::softmax", "aten::sigmoid", "aten::_softmax"})
DISPATCH_OPS = frozenset({"aten::index", "aten::index_select", "aten::index_add_", "aten::index_put_", "aten::scatter_add_",
                          "aten::scatter_", "aten::gather", "aten::scatter_reduce_"})
EXPERT_GEMM_OPS = frozenset({"aten::_grouped_mm", "aten::_scaled_grouped_mm"})
ROUTING_NODES = frozenset({"TopkBackward0", "SoftmaxBackward0", "SigmoidBackward0", "SortBackward0"})
DISPATCH_NODES = frozenset({"IndexBackward0", "IndexSelectBackward0", "IndexAddBackward0", "IndexPutBackward0",
                            "ScatterAddBackward0", "GatherBackward0", "ScatterBackward0"})
EXPERT_NODES = frozenset({"GroupedMmBackward0"})


_NODE = re.compile(r"^[A-Za-z0-9_]+Backward\d+$")
"""An autograd node's own event (``IndexBackward0``): transparent unless its name has a role."""


def _name_roles(name: str) -> tuple[str | None, str | None, bool]:
    """(role anywhere, role inside a block with experts, transparent) of an op name."""
    node = name.removeprefix(kineto.BACKWARD_NODE).strip() if name.startswith(kineto.BACKWARD_NODE) else name
    for nodes, role in ((EXPERT_NODES, "expert_gemm"), (ROUTING_NODES, "routing"), (DISPATCH_NODES, "dispatch")):
        if node in nodes:
            return role, role, False
    if name in EXPERT_GEMM_OPS:
        return "expert_gemm", "expert_gemm", False
    if name in ("aten::topk", "aten::histc", "aten::bincount"):
        return "routing", "routing", False
    if name in ROUTING_OPS:
        return None, "routing", False
    if name in DISPATCH_OPS:
        return None, "dispatch", False
    return None, None, name.startswith(kineto.BACKWARD_NODE) or bool(_NODE.match(name))


def role_ops(trace: Trace, windows: pd.DataFrame, expert_rows: int | None = None,
             attention_ops: tuple[str, ...] = ()) -> pd.DataFrame:
    """One row per outermost op of a role: ts_us, dur_us, tid, name, role, step.
    ``expert_rows``: the rows a block's dense GEMMs see (tokens of a micro-batch), below which a
    GEMM in a block with experts is an expert's; ``attention_ops``: op names that start an
    attention beside the aten attention kernels (``aten::bmm`` where the model's attention is two
    matmuls). An op nested in another op (not an autograd node
    without a role) is that op's work: a sort inside an embedding's backward is not routing."""
    ev = trace.events
    empty = pd.DataFrame(columns=["ts_us", "dur_us", "tid", "name", "role", "step"])
    if ev.empty or windows is None or windows.empty:
        return empty
    cpu = ev[str_mask(ev["cat"], lambda c: c == kineto.CPU_OP)]
    if cpu.empty:
        return empty
    cat = cpu["name"].astype("category")
    table = [_name_roles(str(n)) for n in cat.cat.categories]
    codes = cat.cat.codes.to_numpy()
    anywhere = np.array([t[0] for t in table], dtype=object)[codes]
    inside = np.array([t[1] for t in table], dtype=object)[codes]
    transparent = np.array([t[2] for t in table], dtype=bool)[codes]
    names = str_values(cat)
    ts, dur = cpu["ts_us"].to_numpy(float), cpu["dur_us"].to_numpy(float)
    tid = str_values(cpu["tid"])
    in_block = _in_blocks(names, ts, attention_ops)
    role = np.where(in_block, inside, anywhere)
    # a per-expert loop's GEMMs: dense GEMMs in a block with experts that saw fewer rows
    if expert_rows and "op_args" in cpu:
        gemm = np.flatnonzero(in_block & np.isin(names, ["aten::mm", "aten::addmm"]))
        args = cpu["op_args"].to_numpy()
        rows = [_rows(names[i], args[i]) for i in gemm]
        role[gemm[[r is not None and r < expert_rows for r in rows]]] = "expert_gemm"
    # a per-expert GEMM runs under aten::linear → aten::matmul: see through them inside blocks
    keep = ~transparent & ~(in_block & np.isin(names, ["aten::linear", "aten::matmul"]))
    out = pd.DataFrame({"ts_us": ts[keep], "dur_us": dur[keep], "tid": tid[keep], "name": names[keep], "role": role[keep]})
    out = _outermost(out)
    out = out[out["role"].notna().to_numpy()].reset_index(drop=True)
    lo, hi = ("host_start_us", "host_end_us") if "host_start_us" in windows else ("start_us", "end_us")
    w = windows.sort_values(lo)
    i = np.searchsorted(w[lo].to_numpy(), out["ts_us"].to_numpy(), side="right") - 1
    okw = (i >= 0) & (out["ts_us"].to_numpy() < w[hi].to_numpy()[np.clip(i, 0, None)])
    out["step"] = np.where(okw, w["step"].to_numpy()[np.clip(i, 0, None)], -1)
    return out


def _rows(name: str, args) -> int | None:
    """The rows (M) a GEMM multiplied, from its decoded ``Input Dims``."""
    d = getattr(args, "dims", None)
    try:
        return int((d[1] if name == "aten::addmm" else d[0])[0]) if d else None
    except (IndexError, TypeError):
        return None


def _in_blocks(names: np.ndarray, ts: np.ndarray, attention_ops: tuple[str, ...] = ()) -> np.ndarray:
    """Ops inside a forward block with experts: from the GEMM before a router op (its scores) to
    the next attention forward or backward node, whichever comes first."""
    att = np.sort(ts[np.isin(names, [n for n in ATTENTION if "backward" not in n] + list(attention_ops))])
    bwd = np.sort(ts[np.char.startswith(names.astype(str), kineto.BACKWARD_NODE)])
    router = np.sort(ts[np.isin(names, ["aten::topk", "aten::histc", "aten::_grouped_mm"])])
    out = np.zeros(len(ts), dtype=bool)
    if not len(router):
        return out
    stop = np.sort(np.concatenate([att, bwd]))
    nxt = np.searchsorted(stop, router, side="right")
    end = np.where(nxt < len(stop), stop[np.clip(nxt, 0, max(len(stop) - 1, 0))], np.inf)
    gemm = np.sort(ts[np.isin(names, ["aten::mm", "aten::addmm", "aten::linear"])])
    prev = np.searchsorted(gemm, router, side="left") - 1
    start = np.where(prev >= 0, gemm[np.clip(prev, 0, None)], router)
    order = np.argsort(start, kind="stable")
    start, end = start[order], np.maximum.accumulate(end[order])
    k = np.searchsorted(start, ts, side="right") - 1
    ok = k >= 0
    out[ok] = ts[ok] < end[k[ok]]
    return out


def _outermost(df: pd.DataFrame) -> pd.DataFrame:
    """Rows not nested in an earlier row of the same thread."""
    if df.empty:
        return df
    df = df.sort_values(["tid", "ts_us", "dur_us"], ascending=[True, True, False], kind="stable", ignore_index=True)
    end = df["ts_us"] + df["dur_us"]
    prior = end.groupby(df["tid"]).cummax().groupby(df["tid"]).shift()
    return df[~(df["ts_us"] < prior).to_numpy()].reset_index(drop=True)


def moe_time(trace: Trace, windows: pd.DataFrame, model: dict) -> pd.DataFrame:
    """One row per step of a rank whose model has experts (``model``: analysis.model.rank_model):
    MOE_COLUMNS, ``source`` "kernels" (GPU) or "cpu ops". Empty for a model with none."""
    fields = (model or {}).get("fields") or {}
    if "experts" not in fields or windows is None or windows.empty:
        return pd.DataFrame(columns=MOE_COLUMNS)
    mb, seq = (fields.get(k, {}).get("value") for k in ("micro_batch", "seq"))
    matmul_attention = "matmul" in str(((model or {}).get("evidence") or {}).get("attention_op", ""))
    roles = role_ops(trace, windows, mb * seq if mb and seq else None, ("aten::bmm",) if matmul_attention else ())
    gpu = trace.has_gpu
    if gpu and not roles.empty:
        k = gpu_launches(trace, roles.reset_index(drop=True))
        k = k[k["op"] >= 0]
        per = pd.DataFrame({"step": roles["step"].to_numpy()[k["op"].to_numpy()], "role": roles["role"].to_numpy()[k["op"].to_numpy()],
                            "ms": k["dur_us"].to_numpy() / 1e3})
    else:
        per = pd.DataFrame({"step": roles["step"], "role": roles["role"], "ms": roles["dur_us"] / 1e3})
    by = per.groupby(["step", "role"])["ms"].sum() if not per.empty else pd.Series(dtype=float)
    rows = []
    for step, lo, hi in windows[["step", "start_us", "end_us"]].itertuples(index=False):
        row = {"step": int(step), "step_ms": (hi - lo) / 1e3, "source": "kernels" if gpu else "cpu ops"}
        for r in ROLES:
            row[f"{r}_ms"] = float(by.get((step, r), 0.0))
        rows.append(row)
    return pd.DataFrame(rows, columns=MOE_COLUMNS)


def moe_shares(per_rank: dict[int, pd.DataFrame]) -> dict | None:
    """The run's ``efficiency.moe``: each role's share of the recorded step (mean over ranks and
    steps: the role's recorded time against the recorded step), its ms per step, and where the
    times come from; None when no rank has experts."""
    frames = [f.assign(rank=r) for r, f in per_rank.items() if f is not None and not f.empty]
    if not frames:
        return None
    df = pd.concat(frames, ignore_index=True)
    df = df[df["step_ms"] > 0]
    if df.empty:
        return None
    out: dict = {"source": str(df["source"].iloc[0])}
    for r in ROLES:
        out[f"{r}_ms"] = round(float(df[f"{r}_ms"].mean()), 4)
        out[f"{r}_pct"] = round(float((100.0 * df[f"{r}_ms"] / df["step_ms"]).mean()), 2)
    return out
