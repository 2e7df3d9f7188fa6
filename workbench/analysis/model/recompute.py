"""Recomputation (activation checkpointing): forward compute re-run inside backward.

Forward ops re-run inside a backward node's span (``autograd::engine::evaluate_function: …``,
kineto.BACKWARD_NODE; non-reentrant ``torch.utils.checkpoint`` runs its recompute there):
attention forwards and forward GEMMs (``addmm``, a ``mm`` under ``aten::linear``/``aten::matmul``,
convolutions) inside backward, per layer and by FLOPs.
"""

from __future__ import annotations

import pandas as pd

from workbench.analysis.model.context import FWD_ATTENTION, Candidates, field
from workbench.analysis.model.projections import weight

RECOMPUTE_MIN = 0.02
"""Forward FLOPs re-run inside backward below 2 % of the forward's are no recomputation (a loss or
a norm recomputed by a fused kernel's backward is not activation checkpointing)."""
FULL_MIN = 0.6
"""Recomputation is ``full`` when every attention layer re-ran and ≥ 60 % of the blocks' forward
GEMM FLOPs did. Not 100 %: non-reentrant checkpointing stops recomputing once every saved tensor
is back, so a block's last GEMM (the MLP's down projection, whose output backward does not need)
never re-runs — 69 % of the blocks' forward FLOPs on the 370M GPT with every block checkpointed
(traces/plan_gpu_370m_b16_ac), ~73 % on a Llama-shaped block. Recomputing only attention and its
projections (a selective policy) re-runs ~35 %; the output head is outside the blocks."""


OP_MIN = 0.10
"""A selective policy that re-runs at least 10 % of the blocks' forward GEMM FLOPs recomputes matmuls
(torchtitan's op-level policy re-runs every other one: 30-32 % of the blocks' forward FLOPs on its
Llama 3 3B and 8B at seq 8192, attention included); Korthikanti's re-runs attention only (4 % on the
engine's 1.3B GPT)."""


def recompute(ops: pd.DataFrame, steps: list[int], token_table) -> Candidates:
    """``recompute``, ``recompute_fraction`` and ``recompute_mode``: forward compute re-run inside
    backward spans, and which mode that is."""
    if ops.empty or "forward" not in ops or not ops["forward"].any():
        return {}
    fwd = ops[ops["forward"] & ops["step"].isin(steps)]
    if not (fwd["in_bwd"]).any() and not (~fwd["in_bwd"]).any():
        return {}
    outside, inside = fwd[~fwd["in_bwd"]], fwd[fwd["in_bwd"]]
    if outside["flops"].sum() <= 0:
        return {}
    # the output head runs outside the checkpointed blocks: the blocks' forward is the rest
    head = 0.0
    if token_table is not None:
        v = token_table[0]
        is_head = [(weight(n, d) or (0, 0))[1] == v for n, d in zip(outside["name"], outside["dims"])]
        head = float(outside["flops"][is_head].sum())
    blocks = float(outside["flops"].sum()) - head
    frac = float(inside["flops"].sum()) / float(outside["flops"].sum())
    frac_blocks = float(inside["flops"].sum()) / blocks if blocks > 0 else frac
    att_out = int(outside["name"].isin(FWD_ATTENTION).sum())
    att_in = int(inside["name"].isin(FWD_ATTENTION).sum())
    n = len(steps)
    reran = inside["name"].value_counts()
    what = ", ".join(f"{c / n:g} {name}" for name, c in reran.head(3).items())
    src = (f"{frac:.0%} of the forward FLOPs re-ran inside backward nodes ({frac_blocks:.0%} of the blocks' GEMMs; "
           f"per step: {what}); {att_in / n:g} of {att_out / n:g} attention forwards per step")
    if frac < RECOMPUTE_MIN and att_in == 0:
        kind = "none"
        src = "no forward compute re-ran inside backward nodes"
    elif frac_blocks >= FULL_MIN and att_in >= att_out:
        kind = "full"
    else:
        kind = "selective"
    out = {"recompute": field(kind, src), "recompute_fraction": field(round(frac, 4), src)}
    mode = _mode(kind, frac_blocks, att_in, att_out)
    if mode is not None:
        out["recompute_mode"] = field(mode, src, "medium")
    return out


def _mode(kind: str, frac_blocks: float, att_in: int, att_out: int) -> str | None:
    """Which selective policy the counts show, in the planner's words (workbench.plan.recompute; None
    for none and full, which ``recompute`` already says, and for counts no policy explains):
    ``op`` (no attention re-ran but matmuls did: their outputs partly saved, the attention's kept —
    torchtitan's op-level policy), ``selective`` (every attention re-ran, few matmuls: the attention
    core, Korthikanti et al.), ``layer:N`` (some blocks re-ran whole: every N-th)."""
    if kind in ("none", "full") or att_out <= 0:
        return None
    if att_in == 0:
        return "op" if frac_blocks >= OP_MIN else None
    if att_in >= att_out:
        return "selective" if frac_blocks < OP_MIN else None
    return f"layer:{max(2, round(att_out / att_in))}"
