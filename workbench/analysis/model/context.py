"""What every kind of evidence about the model reads: one rank's decoded ops, tagged once.

:class:`Context` holds the ops whose shapes the loader decoded (``op_args``: the counted GEMMs,
convolutions and attention, plus the model-describing ops of ``kineto.MODEL_OP``), each with its
step, whether it ran inside a backward node's span, and whether it is forward work. The evidence
modules (embedding, attention, projections, experts, parameters, passes, recomputation, layout,
optimizer) read it and return candidate fields; :func:`workbench.analysis.model.rank.rank_model`
reconciles them. A field is ``{value, source, confidence}``; a field the trace cannot show is
absent, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field
from typing import Any

import numpy as np
import pandas as pd

from workbench.analysis.flops import ATTENTION
from workbench.analysis.intervals import merge, str_mask
from workbench.format import kineto
from workbench.load.trace import Trace

CONFIDENCE = ("low", "medium", "high")

FWD_ATTENTION = frozenset(n for n in ATTENTION if "backward" not in n)
FORWARD_ONLY = frozenset({"aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::convolution", "aten::_scaled_mm"})
"""Counted ops that backward formulas never call (a linear's backward multiplies with ``mm``)."""
FORWARD_CONTAINERS = ("aten::linear", "aten::matmul")
RECOMPUTING_FUNCTIONS = ("CheckpointFunctionBackward",)
"""Custom autograd functions whose backward re-runs the forward (reentrant ``torch.utils.checkpoint``)."""


def own_backward_nodes(names: pd.Series) -> np.ndarray:
    """Backward nodes of custom autograd functions (``autograd::engine::evaluate_function: XBackward``,
    a Python ``torch.autograd.Function``; built-in nodes end in ``Backward0``/``Backward1``), other
    than a checkpoint's: their own backward formula runs there (DeepSpeed ZeRO-3's
    ``LinearFunctionForZeroStage3Backward`` multiplies with ``matmul``), which is no forward re-run."""
    prefix = kineto.BACKWARD_NODE + ": "
    return str_mask(names, lambda c: c.str.startswith(prefix) & c.str.endswith("Backward")
                    & ~c.str.endswith(RECOMPUTING_FUNCTIONS))
GROUPED_MM = frozenset({"aten::_grouped_mm", "aten::_scaled_grouped_mm"})
"""A mixture of experts' expert GEMMs, every expert's rows in one call (analysis.flops)."""

Candidates = dict[str, dict[str, Any]]
"""Field name → one candidate ``{value, source, confidence}``, as each evidence module returns them."""


def field(value: Any, source: str, confidence: str = "high") -> dict[str, Any]:
    """One entry of ``model.fields``."""
    return {"value": value, "source": source, "confidence": confidence}


def rank_of(confidence: str) -> int:
    return CONFIDENCE.index(confidence)


def least(*confidences: str) -> str:
    """The weakest of several confidences: a derived field is as sure as its least sure input."""
    return min(confidences, key=rank_of)


def value(model: dict | None, name: str) -> Any:
    """``model.fields[name].value``, or None."""
    return ((model or {}).get("fields") or {}).get(name, {}).get("value")


def reconcile(known: Candidates, found: Candidates) -> Candidates:
    """Merge one module's candidates into the fields known so far: the surer one wins; at equal
    confidence the later evidence (modules run from the most direct to the one that corrects it:
    the attention's query says whether the embedding's input was [batch, seq] or [seq, batch])."""
    for name, cand in found.items():
        if cand is None:
            continue
        old = known.get(name)
        if old is None or rank_of(cand["confidence"]) >= rank_of(old["confidence"]):
            known[name] = cand
    return known


class Spans:
    """Intervals per thread, merged, with a point-in-interval test."""

    def __init__(self, ev: pd.DataFrame, mask: np.ndarray) -> None:
        self.by_tid: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for tid, g in ev[mask].groupby("tid", observed=True):
            s, e = merge(g["ts_us"].to_numpy(), (g["ts_us"] + g["dur_us"]).to_numpy())
            self.by_tid[str(tid)] = (s, e)

    def __bool__(self) -> bool:
        return bool(self.by_tid)

    def inside(self, tids: np.ndarray, ts: np.ndarray) -> np.ndarray:
        out = np.zeros(len(ts), dtype=bool)
        for tid, (s, e) in self.by_tid.items():
            m = tids == tid
            if not m.any():
                continue
            i = np.searchsorted(s, ts[m], side="right") - 1
            out[m] = (i >= 0) & (ts[m] < e[np.clip(i, 0, None)])
        return out


def window_bounds(windows: pd.DataFrame | None) -> list[tuple[int, float, float]]:
    if windows is None or windows.empty:
        return []
    lo, hi = ("host_start_us", "host_end_us") if "host_start_us" in windows else ("start_us", "end_us")
    w = windows.sort_values(lo)
    return [(int(s), float(a), float(b)) for s, a, b in w[["step", lo, hi]].itertuples(index=False)]


def stepper(bounds):
    lo = np.array([b[1] for b in bounds])
    hi = np.array([b[2] for b in bounds])
    st = np.array([b[0] for b in bounds])

    def step_of(ts: np.ndarray) -> np.ndarray:
        i = np.searchsorted(lo, ts, side="right") - 1
        ok = (i >= 0) & (ts < hi[np.clip(i, 0, None)])
        return np.where(ok, st[np.clip(i, 0, None)], -2)
    return step_of


def by_step(ts: np.ndarray, steps: np.ndarray) -> dict[int, np.ndarray]:
    """``ts`` split by their step, each part in its original order."""
    ts, steps = np.asarray(ts), np.asarray(steps)
    order = np.argsort(steps, kind="stable")
    keys, first = np.unique(steps[order], return_index=True)
    return {int(k): part for k, part in zip(keys, np.split(ts[order], first[1:]))}


def median(values: list) -> float | None:
    v = [x for x in values if x is not None]
    return float(np.median(v)) if v else None


@dataclass
class Context:
    """One rank's ops, tagged. ``args``: every decoded op (ts_us, tid, name, args, in_bwd, step);
    ``ops``: the counted ops that ran (analysis.flops.op_flops) with in_bwd, step, forward (bool)
    and dims (their ``Input Dims``). Set by :mod:`.passes`: ``n_mb`` (forward passes per step),
    ``b0`` (the first backward's start in the first step), ``passes_before`` (forward passes
    before it), ``grads`` (the first backward pass's AccumulateGrad rows); by the other modules
    what later ones read. ``evidence`` becomes the rank's JSON-able ``evidence``."""

    trace: Trace
    ev: pd.DataFrame
    names: pd.Series
    args: pd.DataFrame
    ops: pd.DataFrame
    bwd: Spans
    steps: list[int]
    step_of: Any
    evidence: dict[str, Any] = dc_field(default_factory=dict)
    n_mb: int | None = None
    b0: float = np.inf
    passes_before: int = 1
    grads: pd.DataFrame | None = None
    tables: dict = dc_field(default_factory=dict)
    """Embedding tables looked up in forward, ``(rows, width) → calls`` (:mod:`.embedding`)."""
    attention_ts: np.ndarray = dc_field(default_factory=lambda: np.zeros(0))
    """Start times of the attention forwards of the first forward passes (:mod:`.attention`)."""
    proj: Any = None
    """What :mod:`.projections` read from the forward GEMMs (its ``Projections``)."""
    _bwd_by_step: dict | None = dc_field(default=None, repr=False)

    @property
    def first(self) -> int:
        return self.steps[0]

    def forward_first(self) -> pd.DataFrame:
        """The first step's counted forward ops outside backward, in time order."""
        o = self.ops
        return o[(o["step"] == self.first) & o["forward"] & ~o["in_bwd"]]

    def first_pass_args(self, names) -> pd.DataFrame:
        """Decoded ops of these names in the first step's forward passes before its first backward."""
        a = self.args
        return a[a["name"].isin(list(names)) & ~a["in_bwd"] & (a["step"] == self.first) & (a["ts_us"] < self.b0)]

    def bwd_starts(self, step: int) -> np.ndarray:
        """Start times of the step's autograd nodes. The nodes are found and split by step once
        per rank: per step, the name test over every event cost 2 ms, 20 s on 10,000 steps."""
        if self._bwd_by_step is None:
            t = self.ev["ts_us"].to_numpy()[str_mask(self.names, lambda c: c.str.startswith(kineto.BACKWARD_NODE))]
            self._bwd_by_step = by_step(t, self.step_of(t))
        return self._bwd_by_step.get(step, np.zeros(0))


def build(trace: Trace, windows: pd.DataFrame, ops: pd.DataFrame) -> Context | None:
    """The context of one rank, or None when the trace has no shapes or no step."""
    ev = trace.events
    bounds = window_bounds(windows)
    if "op_args" not in ev or not bounds or ev.empty:
        return None
    names = ev["name"]
    bwd = Spans(ev, str_mask(names, lambda c: c.str.startswith(kineto.BACKWARD_NODE)))
    a = ev[ev["op_args"].notna().to_numpy()]  # a few thousand rows: strings only here, never per event
    args = pd.DataFrame({"ts_us": a["ts_us"].to_numpy(), "tid": np.asarray(a["tid"].astype(str).to_numpy(), dtype=object),
                         "name": np.asarray(a["name"].astype(str).to_numpy(), dtype=object),
                         "args": a["op_args"].to_numpy()})
    args["in_bwd"] = bwd.inside(args["tid"].to_numpy(), args["ts_us"].to_numpy())
    step_of = stepper(bounds)
    args["step"] = step_of(args["ts_us"].to_numpy())
    by_key = dict(zip(zip(args["ts_us"].tolist(), args["name"].tolist()), args["args"].tolist()))

    ops = ops.copy() if ops is not None and not ops.empty else pd.DataFrame(
        columns=["ts_us", "tid", "name", "kind", "dtype", "flops"])
    ops["tid"] = ops["tid"].astype(str)
    ts, tids = ops["ts_us"].to_numpy(dtype=float), ops["tid"].to_numpy(dtype=object)
    ops["in_bwd"] = bwd.inside(tids, ts)
    ops["step"] = step_of(ts)
    containers = Spans(ev, str_mask(names, lambda c: c.isin(FORWARD_CONTAINERS)))
    in_container = containers.inside(tids, ts)
    # a matmul inside a custom function's own backward is that backward (aten::linear never is)
    own = Spans(ev, own_backward_nodes(names))
    if own:
        linear = Spans(ev, str_mask(names, lambda c: c == "aten::linear"))
        in_container &= ~own.inside(tids, ts) | linear.inside(tids, ts)
    is_attn_fwd = ops["name"].isin(FWD_ATTENTION).to_numpy()
    # outside backward every counted op is forward work (a compiled graph's mm has no aten::linear
    # around it); inside, only what backward formulas never call, or a mm under a forward container
    # (a grouped GEMM inside backward is its gradient: forward only outside)
    ops["forward"] = ~ops["in_bwd"].to_numpy() | is_attn_fwd | ops["name"].isin(FORWARD_ONLY).to_numpy() | (
        ops["name"].isin(["aten::mm", "aten::bmm"]).to_numpy() & in_container)
    ops["dims"] = [getattr(by_key.get((t, n)), "dims", None) for t, n in zip(ops["ts_us"].tolist(), ops["name"].tolist())]
    steps = sorted({s for s, _, _ in bounds})
    ctx = Context(trace=trace, ev=ev, names=names, args=args, ops=ops, bwd=bwd, steps=steps, step_of=step_of)
    ctx.evidence["steps"] = len(steps)
    return ctx
