"""The search: every layout of a model on a cluster, those that fit ranked by predicted step time,
and why the others lost.

The space (Narayanan et al. 2021, §3, name these trade-offs): tensor parallel inside a node
(powers of two dividing the heads), pipeline stages (1F1B or GPipe; uneven stages allowed), data parallel over the
rest (dividing the global batch), micro-batch sizes, interleaving (layers per stage divisible by
vpp, micro-batches by pp), ZeRO stages, recomputation (none / selective / full, or the modes the
trainer offers: workbench.plan.recompute), sequence parallel,
and for a mixture of experts the expert-parallel degree: every ep that divides both the experts
and dp x tp (the ranks it is carved from, see workbench.plan.layout).
Memory is checked first (cheap); only layouts that fit are timed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from workbench.format.errors import WorkbenchError
from workbench.plan.comm import collectives
from workbench.hardware.systems import FIT_FRACTION, Cluster
from workbench.plan.layout import RECOMPUTE, Layout, Stack, stack_for
from workbench.plan.memory import MemoryBreakdown, memory
from workbench.plan.model import ModelSpec
from workbench.plan.efficiency import Efficiencies
from workbench.plan.timing import StepTime, step_time

MICRO_BATCHES = (1, 2, 4, 8, 16, 32)
VIRTUAL_STAGES = (1, 2, 3, 4, 6, 8)


@dataclass(kw_only=True, slots=True)
class PlanRequest:
    model: ModelSpec
    """What is trained (its ``seq`` is the sequence length used)."""
    cluster: Cluster
    global_batch: int
    """Sequences per optimizer step."""
    stack: str = "megatron"
    """megatron | torch (see workbench.plan.layout)."""
    dtype: str = "bf16"
    """Compute dtype."""
    efficiencies: Efficiencies = field(default_factory=Efficiencies)
    top: int = 5
    """Layouts to report."""
    layout: Layout | None = None
    """A layout to evaluate whatever the search finds (``--layout``)."""
    flash_attention: bool | None = None
    """Megatron stack: fused attention (newer Megatron-LM / Transformer Engine); default: not (2021-22)."""
    dp_overlap: bool | None = None
    """Megatron stack: data-parallel reduction overlaps backward (newer Megatron-LM); default: not."""
    ep_overlap: bool | None = None
    """Expert-parallel all-to-alls overlap another micro-batch's compute (DeepSeek's DualPipe); default: not."""
    moe_dispatch: dict | None = None
    """The stack's expert-dispatch fields where they differ from its defaults (``ep_dispatcher``,
    ``ep_routing``, ``ep_imbalance``, ``ep_node_limit``, ``ep_overlap_dualpipe``, ``fp8_matmuls``:
    :class:`workbench.plan.layout.Stack`)."""
    run_stack: Stack | None = None
    """The exact stack of an engine run (``--from-run``), used for ``layout``."""
    from_run: dict | None = None
    """``--from-run``: the run planned (``{path, name, device: cuda|cpu}``), else None."""
    run_job: object | None = None
    """``--from-run``: what the run ran (a :class:`workbench.calibration.from_run.RunJob`), to predict it on
    its own GPUs and batch whatever this request asks."""
    recompute_modes: tuple[str, ...] | None = None
    """The recomputation modes the search tries (the trainer's: :func:`workbench.plan.recompute.modes_for`);
    None: Megatron-LM's and the engine's (none, selective, full)."""
    zero_at_dp1: int | None = None
    """The ZeRO stage layouts with one replica (dp = 1) keep (``--from-run``: the run's): with nothing to
    shard over, every stage is the same layout, so the search offers none as an alternative. None: the
    stack's own (torch: DDP or FSDP2 on one replica)."""

    def __post_init__(self) -> None:
        if self.global_batch < 1:
            raise WorkbenchError("--global-batch must be >= 1")

    def stack_for(self, layout: Layout) -> Stack:
        if self.run_stack is not None and layout == self.layout:
            return self.run_stack
        return stack_for(self.stack, self.dtype, layout, flash_attention=self.flash_attention, dp_overlap=self.dp_overlap,
                         ep_overlap=self.ep_overlap, moe=self.moe_dispatch)


@dataclass(kw_only=True, slots=True)
class Evaluated:
    layout: Layout
    stack: Stack
    memory: MemoryBreakdown
    time: StepTime | None = None
    """None for a layout that does not fit (not timed), unless it was given."""
    problem: str | None = None
    """Why the layout cannot run at all (divisibility), else None."""


@dataclass(kw_only=True, slots=True)
class Loss:
    """One reason layouts lost to the best."""

    reason: str
    """does not fit | recomputation | compute | tensor-parallel communication | expert-parallel
    communication | pipeline bubble |
    pipeline p2p | exposed data-parallel communication | optimizer | host | as fast, more memory
    (a twin of the best, e.g. GPipe beside 1F1B: ties go to the layout that needs less memory)."""
    count: int
    example: str
    """The best layout (--layout spelling) that lost for this reason."""
    detail: str
    """Numbers: how far it lost (s) or how much memory it needs."""


@dataclass(kw_only=True, slots=True)
class Plan:
    request: PlanRequest
    ranked: list[Evaluated]
    """Layouts that fit, fastest first (all of them; the report shows ``top``)."""
    given: Evaluated | None
    """The ``--layout`` one, evaluated whether or not it fits."""
    losses: list[Loss]
    searched: int
    """Layouts considered."""
    fitting: int


def check_layout(m: ModelSpec, layout: Layout, global_batch: int) -> str | None:
    """Why ``layout`` cannot run ``m`` at this batch, or None."""
    if m.heads % layout.tp:
        return f"tp={layout.tp} does not divide the {m.heads} heads"
    if m.kv % layout.tp and layout.tp % m.kv:
        return f"tp={layout.tp} and the {m.kv} kv heads do not divide each other"
    if layout.pp > m.layers:
        return f"pp={layout.pp} > {m.layers} layers"
    if layout.ep > 1:
        if not m.moe:
            return f"ep={layout.ep} needs a mixture of experts ({m.name} is dense)"
        if m.experts % layout.ep:
            return f"ep={layout.ep} does not divide the {m.experts} experts"
        if (layout.dp * layout.tp) % layout.ep:
            return f"ep={layout.ep} does not divide dp x tp = {layout.dp * layout.tp} (it is carved from those ranks)"
    if global_batch % (layout.dp * layout.mb):
        return f"the global batch {global_batch} is not divisible by dp x mb = {layout.dp * layout.mb}"
    if layout.vpp > 1:
        if -(-m.layers // layout.pp) < layout.vpp:
            return f"{-(-m.layers // layout.pp)} layers per stage cannot make {layout.vpp} virtual stages"
        if layout.microbatches(global_batch) % layout.pp:
            return f"interleaving needs the micro-batches ({layout.microbatches(global_batch)}) divisible by pp"
    return None


def evaluate(req: PlanRequest, layout: Layout, timed: bool = True) -> Evaluated:
    """Memory and (when it fits, or ``timed``) step time of one layout."""
    problem = check_layout(req.model, layout, req.global_batch)
    if layout.gpus != req.cluster.gpus:
        problem = problem or f"tp x pp x dp = {layout.gpus}, not the {req.cluster.gpus} GPUs"
    stack = req.stack_for(layout)
    mem = memory(req.model, layout, stack, req.global_batch, req.cluster.gpu.memory_bytes, FIT_FRACTION)
    ev = Evaluated(layout=layout, stack=stack, memory=mem, problem=problem)
    if problem is None and (mem.fits or timed):
        ev.time = step_time(req.model, layout, stack, req.global_batch, req.cluster, req.efficiencies)
    return ev


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending, in √n steps."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def layouts(req: PlanRequest) -> list[Layout]:
    """Every layout of the search space that can run (see the module docstring)."""
    m, n, B = req.model, req.cluster.gpus, req.global_batch
    out = []
    tps = [t for t in (1, 2, 4, 8, 16) if t <= min(n, req.cluster.gpus_per_node) and check_layout(m, Layout(tp=t), 1) is None]
    for tp in tps:
        # stages may be uneven (the first take one more layer), as the engine and Llama 3 split them;
        # Megatron-LM itself wants L divisible by pp (x vpp): the slowest stage sets the pace
        # the divisors of n / tp (at most a few hundred for any cluster), never a loop over layers
        for pp in (p for p in divisors(n // tp) if p <= m.layers):
            dp = n // (tp * pp)
            if B % dp:
                continue
            for mb in (b for b in MICRO_BATCHES if (B // dp) % b == 0):
                mbs = B // (dp * mb)
                for vpp in VIRTUAL_STAGES:
                    if vpp > 1 and (pp == 1 or -(-m.layers // pp) < vpp or mbs % pp):
                        continue
                    # DeepSpeed and Megatron-LM run ZeRO-2/3 without pipelining; FSDP2 runs under it
                    zeros = (0, 1) if (pp > 1 and req.stack == "megatron") else (0, 1, 2, 3)
                    if dp == 1:
                        # ZeRO shards nothing over one replica, but FSDP2 (the torch stack's ZeRO-3)
                        # on one GPU still saves memory: bf16 blocks, no autocast weight copies, no
                        # DDP buckets — what torchtitan-like trainers run by default on one GPU; a
                        # run's plan keeps the run's own stage there (no ZeRO "alternative" at dp 1)
                        zeros = (0, 3) if req.stack == "torch" else (0,)
                        zeros = zeros if req.zero_at_dp1 is None else (req.zero_at_dp1,)
                    for zero in zeros:
                        for recompute in req.recompute_modes or RECOMPUTE:
                            for sp in ((False, True) if tp > 1 else (False,)):
                                # GPipe takes as long as 1F1B and holds all m micro-batches: it only
                                # ever loses on memory, which the table of losers then says
                                for schedule in (("1f1b", "gpipe") if pp > 1 and vpp == 1 else ("1f1b",)):
                                    for ep in eps(m, dp * tp):
                                        out.append(Layout(tp=tp, pp=pp, dp=dp, zero=zero, mb=mb, recompute=recompute,
                                                          sp=sp, vpp=vpp, schedule=schedule, ep=ep))
    return out


def eps(m: ModelSpec, ranks: int) -> list[int]:
    """Expert-parallel degrees for ``ranks`` = dp x tp ranks of a stage: 1 for a dense model, else
    every divisor of both the experts and the ranks."""
    if not m.moe:
        return [1]
    return [e for e in divisors(math.gcd(m.experts, ranks))]


COMPONENTS = (("recompute_s", "recomputation"), ("compute_s", "compute"), ("tp_comm_s", "tensor-parallel communication"),
              ("ep_comm_s", "expert-parallel communication"),
              ("bubble_s", "pipeline bubble"), ("pp_comm_s", "pipeline p2p"),
              ("dp_exposed_s", "exposed data-parallel communication"), ("optimizer_s", "optimizer"), ("host_s", "host"))


TIE = "as fast, more memory"
"""The reason of a layout that takes as long as the best (to the half millisecond shown) and lost
the tie on memory: no component of its time is worse, and saying "+0 ms of recomputation" of one
that does not recompute would not be true."""
TIE_S = 0.5e-3


def _why(ev: Evaluated, best: Evaluated) -> tuple[str, float]:
    """The component in which ``ev`` loses most to ``best`` (compute net of recomputation), or
    :data:`TIE` where it loses nothing that shows."""
    def parts(e: Evaluated) -> dict[str, float]:
        t = e.time
        d = {k: getattr(t, k) for k, _ in COMPONENTS}
        d["compute_s"] -= d["recompute_s"]
        return d
    a, b = parts(ev), parts(best)
    key = max(a, key=lambda k: a[k] - b[k])
    if a[key] - b[key] < TIE_S or f"{(a[key] - b[key]) * 1e3:+.0f}" == "+0":  # what "+0 ms" would say
        return TIE, ev.time.step_s - best.time.step_s
    return dict(COMPONENTS)[key], a[key] - b[key]


def plan(req: PlanRequest) -> Plan:
    """Search, rank, explain (and evaluate ``req.layout`` when given)."""
    candidates = layouts(req)
    evaluated = [evaluate(req, lay, timed=False) for lay in candidates]
    given = evaluate(req, req.layout, timed=True) if req.layout else None
    if given is not None and req.layout not in set(candidates):
        # a --layout outside the search space (e.g. a micro-batch of 64) that runs and fits is a
        # layout like any other: ranked and counted among those that fit
        candidates.append(req.layout)
        evaluated.append(given if (given.problem is None and given.memory.fits) else evaluate(req, req.layout, timed=False))
    # ties (GPipe and its 1F1B twin take equally long) go to the layout that needs less memory
    fit = sorted((e for e in evaluated if e.time is not None), key=lambda e: (round(e.time.step_s, 9), e.memory.total))
    losses: list[Loss] = []
    too_big = [e for e in evaluated if e.time is None]
    if too_big:
        small = min(too_big, key=lambda e: e.memory.total)
        losses.append(Loss(reason="does not fit", count=len(too_big), example=small.layout.key(),
                           detail=f"the closest needs {small.memory.total / 2**30:.2f} GiB, "
                                  f"{(small.memory.total - FIT_FRACTION * req.cluster.gpu.memory_bytes) / 2**20:,.0f} MiB "
                                  f"over the {FIT_FRACTION * req.cluster.gpu.memory_gib:.1f} GiB usable ({100 * FIT_FRACTION:.0f} % of "
                                  f"the GPU's {req.cluster.gpu.memory_gib:.1f} GiB)"))
    if fit:
        best = fit[0]
        by_reason: dict[str, list[tuple[Evaluated, float]]] = {}
        for e in fit[1:]:
            reason, excess = _why(e, best)
            by_reason.setdefault(reason, []).append((e, excess))
        for reason, items in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
            e, excess = min(items, key=lambda it: it[0].time.step_s)
            losses.append(Loss(reason=reason, count=len(items), example=e.layout.key(),
                               detail=(f"its step is the best's ({e.time.step_s * 1e3:,.0f} ms) and it needs "
                                       f"{(e.memory.total - best.memory.total) / 2**30:+.2f} GiB per GPU" if reason == TIE else
                                       f"its best is {e.time.step_s / best.time.step_s:.2f}x the best step "
                                       f"({excess * 1e3:+.0f} ms of {reason})")))
    return Plan(request=req, ranked=fit, given=given, losses=losses, searched=len(candidates), fitting=len(fit))


def collectives_of(req: PlanRequest, ev: Evaluated, stage: int = 0):
    return collectives(req.model, ev.layout, ev.stack, req.global_batch, req.cluster, stage)
