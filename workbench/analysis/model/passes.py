"""Forward passes per optimizer step (micro-batches), and where the first backward pass begins.

Every backward pass accumulates every trainable parameter's gradient once
(``torch::autograd::AccumulateGrad``), so the step's AccumulateGrads over the first pass's are the
passes (a pipeline's warm-up runs several forwards before the first backward: forward → backward
transitions would miss those); then a pipeline's ``Forward i`` actions; then the transitions.
"""

from __future__ import annotations

import numpy as np

from workbench.analysis.intervals import str_mask
from workbench.analysis.model.context import Candidates, Context, by_step, field, least, median
from workbench.format import kineto


def passes(ctx: Context) -> Candidates:
    """``micro_batches``; sets ``ctx.n_mb``, ``ctx.b0``, ``ctx.passes_before`` and ``ctx.grads``."""
    out: Candidates = {}
    ops, args, first = ctx.ops, ctx.args, ctx.first
    fwd_first = ctx.forward_first()
    b_first = ctx.bwd_starts(first)
    b0 = float(b_first.min()) if len(b_first) else np.inf
    after = fwd_first[fwd_first["ts_us"] > b0]["ts_us"]
    pass_end = float(after.min()) if len(after) else np.inf
    acc = args[(args["name"] == "torch::autograd::AccumulateGrad") & (args["step"] == first)]
    acc_first = acc[(acc["ts_us"] >= b0) & (acc["ts_us"] < pass_end)]
    if np.isinf(pass_end) and len(acc):
        # every backward after every forward (GPipe, or one pass): the passes repeat the same
        # sequence of gradient shapes; its shortest period is one pass
        seq = [tuple(x.dims[0]) if x.dims else () for x in acc["args"]]
        period = next((p for p in range(1, len(seq) + 1) if len(seq) % p == 0 and seq == seq[:p] * (len(seq) // p)), len(seq))
        acc_first = acc.iloc[:period]
    if len(acc_first):
        mb = len(acc) / len(acc_first)
        out["micro_batches"] = field(int(round(mb)), f"{len(acc)} parameter gradients accumulated per step / {len(acc_first)} "
                                     "in the first backward pass", "high" if mb.is_integer() else "medium")
    pp_fwd = ctx.ev[str_mask(ctx.names, lambda c: c.str.match(kineto.PP_FORWARD.pattern))]
    if "micro_batches" not in out and len(pp_fwd):
        pp_steps = ctx.step_of(pp_fwd["ts_us"].to_numpy())
        mb = median([int((pp_steps == s).sum()) for s in ctx.steps])
        if mb:
            out["micro_batches"] = field(int(mb), "pipeline 'Forward i' actions per step on this stage")
    if "micro_batches" not in out:
        fwd = ops[ops["forward"] & ~ops["in_bwd"]]
        fwd_by_step = by_step(fwd["ts_us"].to_numpy(float), fwd["step"].to_numpy())  # once, not a scan per step
        per = [_transitions(fwd_by_step.get(s, np.zeros(0)), ctx.bwd_starts(s)) for s in ctx.steps]
        mb = median(per)
        if mb:
            out["micro_batches"] = field(int(round(mb)), "forward passes per step (forward → backward transitions)", "medium")
    n_mb = out["micro_batches"]["value"] if "micro_batches" in out else None
    # forward passes before the first backward (a pipeline's warm-up: several), by the share of
    # the step's forward compute that ran before it
    before = len(fwd_first[fwd_first["ts_us"] < b0])
    ctx.n_mb, ctx.b0, ctx.grads = n_mb, b0, acc_first
    ctx.passes_before = max(int(round(before / len(fwd_first) * n_mb)), 1) if n_mb and len(fwd_first) else 1
    return out


def _transitions(fwd_ts: np.ndarray, bwd_ts: np.ndarray) -> int | None:
    """Forward → backward transitions in time order: one per forward pass."""
    if not len(fwd_ts) or not len(bwd_ts):
        return None
    kinds = np.concatenate([np.zeros(len(fwd_ts), int), np.ones(len(bwd_ts), int)])
    order = np.argsort(np.concatenate([fwd_ts, bwd_ts]), kind="stable")
    k = kinds[order]
    return int(((k[:-1] == 0) & (k[1:] == 1)).sum())


def tokens(ctx: Context, f: Candidates) -> Candidates:
    """``tokens_per_step``: micro_batch × seq × forward passes."""
    if "micro_batch" in f and "seq" in f and ctx.n_mb:
        tok = f["micro_batch"]["value"] * f["seq"]["value"] * ctx.n_mb
        return {"tokens_per_step": field(int(tok), f"micro_batch {f['micro_batch']['value']} × seq {f['seq']['value']} × "
                                                   f"{ctx.n_mb} forward passes",
                                         least(f["micro_batch"]["confidence"], f["seq"]["confidence"]))}
    return {}

