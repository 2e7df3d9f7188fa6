"""The mixture-of-experts MLP: a token-choice top-k router, routed SwiGLU experts, shared experts.

Shaped after torchtitan's ``torchtitan/models/moe`` (token choice, experts as 3-D weights, a
``tokens_per_expert`` buffer) and written for reading. One forward:

1. the router scores every token against every expert (softmax or sigmoid) and keeps its top k;
2. the token copies are sorted by expert, so each expert's rows are contiguous;
3. the experts run: one ``torch._grouped_mm`` per weight for all experts (offsets = the running
   token counts), or a loop over experts where grouped GEMMs do not run;
4. each copy's output, weighted by its router score, is added back to its token; shared experts
   (a plain SwiGLU MLP) see every token.

Expert parallelism (:mod:`workbench.engine.parallel.ep`) swaps step 3 for dispatch → the local
experts → combine over all-to-all; steps 1, 2 and 4 stay on the token's rank.

``tokens_per_expert`` counts the tokens this rank routed to each expert (all experts, global ids)
since the start, as torchtitan's buffer does: the capture reads how much it grew per step
(workbench.capture.experts). ``expert_bias`` steers the choice towards balance
(:func:`update_expert_bias`, ``model.moe_balance_coeff``); ``skew`` is the ``faults.skewed_routing`` toggle.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from workbench.engine.config import ModelConfig

_GROUPED_MM_RUNS: dict[tuple[str, torch.dtype], bool] = {}


def grouped_mm_runs(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``torch._grouped_mm`` runs forward and backward on this device and dtype (tried once
    on a tiny input: it is missing in older torch, and some GPUs or dtypes lack a kernel)."""
    key = (device.type, dtype)
    if key not in _GROUPED_MM_RUNS:
        try:
            # 16-wide rows: GPU kernels want 16-byte-aligned strides
            x = torch.randn(32, 16, device=device, dtype=dtype, requires_grad=True)
            w = torch.randn(2, 16, 16, device=device, dtype=dtype, requires_grad=True)
            y = torch._grouped_mm(x, w, offs=torch.tensor([8, 32], device=device, dtype=torch.int32))
            y.backward(torch.randn_like(y))  # a real gradient: an expanded one has no kernel on CPU
            _GROUPED_MM_RUNS[key] = True
        except (AttributeError, RuntimeError, NotImplementedError):
            _GROUPED_MM_RUNS[key] = False
    return _GROUPED_MM_RUNS[key]


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)), no biases: the shared experts."""

    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Router(nn.Module):
    """Token-choice top-k: (weights (N, k) fp32, expert ids (N, k) int64) for N tokens."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate = nn.Linear(cfg.d_model, cfg.moe_experts, bias=False)
        self.top_k, self.score = cfg.moe_top_k, cfg.moe_score
        self.register_buffer("expert_bias", torch.zeros(cfg.moe_experts), persistent=True)
        self.skew: tuple[float, int] = (0.0, 0)
        """(strength, experts): faults.skewed_routing, added to those experts' scores for the choice only."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.gate(x).float()  # fp32 scores, as torchtitan: a bf16 softmax over experts ties often
        scores = logits.softmax(-1) if self.score == "softmax" else logits.sigmoid()
        choice = scores + self.expert_bias  # the balancing bias picks, the scores weigh
        strength, favoured = self.skew
        if strength:
            choice[:, :favoured] += strength
        ids = choice.topk(self.top_k, dim=-1).indices
        weights = scores.gather(1, ids)
        if self.score == "sigmoid":
            weights = weights / weights.sum(-1, keepdim=True)
        return weights, ids


class GroupedExperts(nn.Module):
    """``experts`` SwiGLU MLPs as 3-D weights (expert, in, out), run on rows sorted by expert."""

    def __init__(self, d: int, hidden: int, experts: int, grouped_mm: bool, init_std: float, out_std: float) -> None:
        super().__init__()
        self.w_gate = nn.Parameter(torch.empty(experts, d, hidden))
        self.w_up = nn.Parameter(torch.empty(experts, d, hidden))
        self.w_down = nn.Parameter(torch.empty(experts, hidden, d))
        nn.init.normal_(self.w_gate, std=init_std)
        nn.init.normal_(self.w_up, std=init_std)
        nn.init.normal_(self.w_down, std=out_std)
        self.grouped_mm = grouped_mm
        self.parallel = None
        """workbench.engine.parallel.ep.ExpertParallel once the experts are sharded (None: all here)."""

    @property
    def local_experts(self) -> int:
        return self.w_gate.shape[0]

    def forward(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """``x``: rows sorted by expert (global ids), ``counts``: rows per expert → one output row each."""
        if self.parallel is not None:
            return self.parallel(self.run_local, x, counts)
        return self.run_local(x, counts)

    def run_local(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """The experts held here on rows sorted by (local) expert; ``counts``: rows per local expert."""
        dtype = x.dtype
        if torch.is_autocast_enabled(x.device.type):  # _grouped_mm is not an autocast op: cast as it would
            dtype = torch.get_autocast_dtype(x.device.type)
        w_gate, w_up, w_down = (w.to(dtype) for w in (self.w_gate, self.w_up, self.w_down))
        x = x.to(dtype)
        if self.grouped_mm and grouped_mm_runs(x.device, dtype):
            offs = torch.cumsum(counts, 0).to(torch.int32)  # stays on the device: no host sync

            def mm(a, w):
                return torch._grouped_mm(a, w, offs=offs)
        else:
            rows = counts.tolist()  # note: a host sync point (the loop needs each expert's row count)

            def mm(a, w):
                parts = torch.split(a, rows)
                return torch.cat([p @ w[e] for e, p in enumerate(parts)]) if parts else a.new_zeros(0, w.shape[-1])
        return mm(F.silu(mm(x, w_gate)) * mm(x, w_up), w_down)


class MoE(nn.Module):
    """The MoE MLP of one block: (B, T, d) → (B, T, d)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.experts_total, self.top_k = cfg.moe_experts, cfg.moe_top_k
        self.router = Router(cfg)
        out_std = 0.02 / math.sqrt(2 * cfg.n_layer)  # GPT-2's scaled residual projections
        self.experts = GroupedExperts(cfg.d_model, cfg.moe_ffn, cfg.moe_experts, cfg.moe_grouped_mm, 0.02, out_std)
        self.shared = SwiGLU(cfg.d_model, cfg.moe_ffn * cfg.moe_shared_experts) if cfg.moe_shared_experts else None
        self.register_buffer("tokens_per_expert", torch.zeros(cfg.moe_experts, dtype=torch.int64), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        x = x.reshape(-1, d)
        weights, ids = self.router(x)
        flat = ids.reshape(-1)
        # per-expert counts without a host sync (bincount on a GPU reads the max first)
        counts = torch.zeros(self.experts_total, dtype=torch.int64, device=x.device)
        counts.scatter_add_(0, flat, torch.ones_like(flat))
        with torch.no_grad():
            self.tokens_per_expert += counts
        order = torch.argsort(flat, stable=True)  # token copies grouped by expert, tokens in order within
        token = order // self.top_k
        out = self.experts(x[token], counts) * weights.reshape(-1)[order].unsqueeze(1).to(x.dtype)
        y = self.shared(x) if self.shared is not None else torch.zeros_like(x)
        y = y.index_add(0, token, out.to(y.dtype))
        return y.reshape(B, T, d)


@torch.no_grad()
def update_expert_bias(model: nn.Module, coeff: float, group: dist.ProcessGroup | None = None, ranks: int = 1) -> None:
    """Auxiliary-loss-free balancing (Wang et al. 2024, arXiv 2408.15664): each MoE block's
    ``expert_bias`` += coeff · sign(mean load − load), the load being the tokens routed since the
    last update, summed over the ``ranks`` data-parallel ranks of ``group`` (None: the default group). Call after
    each optimizer step: every rank then holds the same biases. One all-reduce for all blocks."""
    moes = [m for m in model.modules() if isinstance(m, MoE)]
    if not moes or not coeff:
        return
    loads = []
    for m in moes:
        seen = getattr(m, "_balanced_at", None)
        loads.append(m.tokens_per_expert - (seen if seen is not None else 0))
        m._balanced_at = m.tokens_per_expert.clone()
    load = torch.stack(loads).float()
    if ranks > 1:
        dist.all_reduce(load, group=group)
    delta = coeff * torch.sign(load.mean(-1, keepdim=True) - load)
    for m, d in zip(moes, delta):
        m.router.expert_bias += d - d.mean()  # centred: only the differences between experts matter
