"""Published large runs, predicted from what each paper states, with the same default
efficiencies for all (no constant fitted to any paper): ``benchmarks/plan_published.py`` prints
the table BENCHMARKS.md holds, ``tests/plan/test_published.py`` recomputes it.

Each row gives the model, the cluster and the layout as the source states them; a knob the source
does not state (micro-batch, interleaving, recomputation, ZeRO stage) is left to the planner, which
takes the fastest layout that fits among those consistent with what is stated, as it would for a
user. A paper's per-GPU TFLOP/s becomes an iteration time through the paper's own FLOP count:

- Narayanan et al. 2021 (SC'21) eq. 3, with recomputation: ``F = 96·B·s·l·h²·(1 + s/6h + V/16lh)``
  per iteration; time = F / (n · X).
- Korthikanti et al. 2022: iteration times directly (their Table 4).
- Llama 3 (Dubey et al. 2024, Table 4): per-GPU TFLOP/s and BF16 MFU; time from 6N + 12·L·h·s FLOPs
  per token (PaLM's count, which BF16 MFU conventionally uses; Meta does not print its formula).
- Mixture of experts (:data:`MOE`): DeepSeek-V2 (DeepSeek-AI 2024, §3.2.3) and DeepSeek-V3
  (DeepSeek-AI 2024, §2.4, §3.1) state their H800 GPU-hours per trillion training tokens (172.8K and
  180K) and their layouts; time = tokens per step / (GPUs · tokens per GPU-second). What the
  planner does not model is said per row: DualPipe's
  near-zero bubble (planned as 1F1B; its all-to-all overlap is modelled, ``ep_overlap``), the
  multi-token-prediction layer, the sequence-length schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.hardware.systems import make_cluster
from workbench.plan.layout import RECOMPUTE, Layout
from workbench.plan.model import ModelSpec
from workbench.plan.presets import PRESETS
from workbench.plan.search import Evaluated, PlanRequest, evaluate, layouts

MEGATRON_2021 = {"sp": False, "zero": 0}
"""What Megatron-LM could not do in 2021: sequence parallelism and the distributed optimizer came in 2022."""
A100 = "A100-SXM4-80GB"   # Selene: DGX A100 80GB, 8 x 200 Gb/s HDR per node (Narayanan et al. 2021, §5)
H100 = "H100"             # Meta's H100 80GB SXM, 8 per server, 400 Gb/s RoCE per GPU (Llama 3, §3.3.1)
H800_LINKS = (1280.0, 400.0)
"""The H800 is an H100 SXM (the same peaks and 80 GB) with NVLink cut to 160 GB/s per direction;
DeepSeek's nodes have one 400 Gb/s InfiniBand NIC per GPU (DeepSeek-V3 report, §3.1): Gbit/s
(intra, inter) for the planner's H100."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Published:
    source: str
    """Paper and table."""
    model: str
    """A preset of workbench.plan.presets."""
    gpu: str
    gpus: int
    global_batch: int
    stated: dict
    """Layout fields the source states (tp, pp, dp, mb, vpp, recompute, sp, zero)."""
    metric: str
    """tflops_per_gpu | iteration_s | gpu_hours_per_t_tokens | tokens_per_gpu_s."""
    value: float
    """The paper's number."""
    dtype: str = "fp16"
    """Compute dtype."""
    stack: str = "megatron"
    """megatron | deepspeed (workbench.plan.layout)."""
    flash_attention: bool = False
    """The run used fused attention (Llama 3)."""
    dp_overlap: bool = False
    """Its data-parallel reduction overlapped backward (torch DDP, DeepSpeed, FSDP)."""
    note: str = ""
    """What else the source says about the run."""
    links: tuple[float, float] | None = None
    """(intra, inter) Gbit/s per GPU when not the GPU's usual system (DeepSeek's H800s)."""
    ep_overlap: bool = False
    """The run hid its expert-parallel all-to-alls behind compute (DualPipe)."""
    split: str = "held_out"
    """fit (the planner's defaults were chosen looking at it) | held_out (never looked at while choosing them)."""
    memory_gib: float | None = None
    """The peak memory per GPU the source reports, where it does."""
    moe_dispatch: dict | None = None
    """How its tokens reach their experts, where not NCCL's all-to-all with random routing
    (``ep_dispatcher``, ``ep_routing``, ``ep_node_limit``: :class:`workbench.plan.layout.Stack`)."""


def _t1(model: str, tp: int, pp: int, n: int, B: int, mb: int, vpp: int, x: float, ddp: str) -> Published:
    # micro-batch, interleaving and torch/local DDP from Megatron-LM's examples/sc21/run_table_1.sh
    return Published(source="Narayanan et al. 2021, Table 1", model=model, gpu=A100, gpus=n, global_batch=B,
                     stated={"tp": tp, "pp": pp, "dp": n // (tp * pp), "mb": mb, "vpp": vpp, "recompute": "full",
                             **MEGATRON_2021},
                     metric="tflops_per_gpu", value=x, dp_overlap=ddp == "torch")


def _t2(model: str, tp: int, pp: int, n: int, B: int, mb: int, x: float) -> Published:
    zero = tp == 1
    stated = {"tp": tp, "pp": pp, "dp": n // (tp * pp), "mb": mb, "recompute": "full", **MEGATRON_2021}
    if zero:
        stated["zero"] = 3
    return Published(source="Narayanan et al. 2021, Table 2" + (" (ZeRO-3)" if zero else " (PTD-P)"), model=model,
                     gpu=A100, gpus=n, global_batch=B, stated=stated, metric="tflops_per_gpu", value=x,
                     stack="deepspeed" if zero else "megatron", dp_overlap=zero,
                     note="DeepSpeed ZeRO-3, no model parallelism" if zero else "")


def _k(model: str, pp: int, n: int, B: int, mode: str, t: float) -> Published:
    stated = {"tp": 8, "pp": pp, "dp": 1, "zero": 0}
    stated.update({"recompute": "full", "sp": False} if mode == "full" else {"recompute": "selective", "sp": True})
    return Published(source="Korthikanti et al. 2022, Table 4", model=model, gpu=A100, gpus=n, global_batch=B,
                     stated=stated, metric="iteration_s", value=t, dtype="bf16",
                     note="full recompute" if mode == "full" else "selective recompute + sequence parallel")


def _llama(n: int, dp: int, x: float) -> Published:
    return Published(source="Dubey et al. 2024 (Llama 3), Table 4", model="llama3-405b", gpu=H100, gpus=n,
                     global_batch=2048, stated={"tp": 8, "pp": 16, "dp": dp}, metric="tflops_per_gpu", value=x,
                     dtype="bf16", flash_attention=True, dp_overlap=True, note="seq 8192, 16M tokens per batch")


def _deepseek(version: str, model: str, gpus: int, B: int, stated: dict, hours_k: float, note: str,
              ep_overlap: bool, moe_dispatch: dict | None = None) -> Published:
    return Published(source=f"DeepSeek-AI 2024 ({version} report)", model=model, gpu=H100, gpus=gpus, global_batch=B,
                     stated=stated, metric="gpu_hours_per_t_tokens", value=hours_k * 1e3, dtype="bf16",
                     flash_attention=True, dp_overlap=True, note=note, links=H800_LINKS, ep_overlap=ep_overlap,
                     moe_dispatch=moe_dispatch)


V3_DISPATCH = {"ep_dispatcher": "deepep", "ep_node_limit": 4, "fp8_matmuls": True, "ep_overlap_dualpipe": True}
"""V3 §2.1.2 and §3.2.2: each token goes to at most 4 nodes, once per node over InfiniBand and on over
NVLink (the kernels DeepEP published); §3.3.1: the blocks' linear layers in FP8 (:mod:`workbench.plan.fp8`)."""

MOE: tuple[Published, ...] = (
    # V2 §3.2.3: 16-way zero-bubble pipeline, 8-way expert parallel, ZeRO-1 data parallel, no tensor
    # parallel, some operators recomputed; 172.8K H800 GPU-hours per trillion tokens; batch up to
    # 9,216 sequences of 4,096. BF16. The GPU count is not stated: 1,024 taken (a per-GPU rate)
    _deepseek("DeepSeek-V2", "deepseek-v2-236b", 1024, 9216, {"tp": 1, "pp": 16, "ep": 8, "zero": 1}, 172.8,
              "H800, BF16, zero-bubble PP (planned as 1F1B); 1,024 GPUs assumed (not stated)", ep_overlap=False),
    # V3 §3.1-3.2: 2,048 H800, 16-way pipeline (DualPipe), 64-way expert parallel over 8 nodes, ZeRO-1,
    # no tensor parallel; 180K H800 GPU-hours per trillion tokens; batch up to 15,360 of 4,096. FP8
    _deepseek("DeepSeek-V3", "deepseek-v3-671b", 2048, 15360, {"tp": 1, "pp": 16, "ep": 64, "zero": 1}, 180.0,
              "H800, FP8 matmuls, DualPipe (planned as 1F1B with the all-to-all hidden), MTP not "
              "modelled", ep_overlap=True, moe_dispatch=V3_DISPATCH),
)
"""Published mixture-of-experts runs: their median error is stated apart (``moe_median``)."""


TABLE: tuple[Published, ...] = (
    _t1("megatron-1.7b", 1, 1, 32, 512, 16, 1, 137, "torch"),
    _t1("megatron-3.6b", 2, 1, 64, 512, 16, 1, 138, "torch"),
    _t1("megatron-7.5b", 4, 1, 128, 512, 16, 1, 142, "torch"),
    _t1("megatron-18b", 8, 1, 256, 1024, 8, 1, 135, "torch"),
    _t1("megatron-39b", 8, 2, 512, 1536, 4, 1, 138, "local"),
    _t1("megatron-76b", 8, 4, 1024, 1792, 2, 3, 140, "local"),
    _t1("megatron-145b", 8, 8, 1536, 2304, 2, 2, 148, "local"),
    _t1("megatron-310b", 8, 16, 1920, 2160, 1, 2, 155, "local"),
    _t1("megatron-530b", 8, 35, 2520, 2520, 1, 3, 163, "local"),
    _t1("megatron-1t", 8, 64, 3072, 3072, 1, 1, 163, "local"),
    # PTD-P: 175B on 96 GPUs per replica, 530B on 280; then DeepSpeed ZeRO-3 alone (model-parallel size 1)
    *(_t2("gpt3-175b", 8, 12, n, 1536, 1, x) for n, x in ((384, 153), (768, 149), (1536, 141))),
    *(_t2("megatron-530b", 8, 35, n, 2240, 1, x) for n, x in ((560, 171), (1120, 167), (2240, 159))),
    *(_t2("gpt3-175b", 1, 1, n, 1536, mb, x) for n, mb, x in ((384, 4, 144), (768, 2, 88), (1536, 1, 44))),
    *(_t2("megatron-530b", 1, 1, n, B, mb, x) for n, B, mb, x in ((640, 2560, 4, 138), (1120, 2240, 2, 98),
                                                                   (2240, 2240, 1, 48))),
    # Korthikanti et al. 2022, Table 3-4: full recomputation vs selective + sequence parallel
    *(_k(model, pp, n, B, mode, t) for model, pp, n, B, times in (
        ("megatron-22b", 1, 8, 4, (1.42, 1.10)), ("gpt3-175b", 8, 64, 64, (18.13, 13.75)),
        ("megatron-530b", 35, 280, 280, (49.05, 37.83)), ("megatron-1t", 64, 512, 512, (94.42, 71.49)))
      for mode, t in zip(("full", "selective"), times)),
    _llama(8192, 64, 430),
    _llama(16384, 128, 400),
)
"""Published dense runs."""


def narayanan_flops(m: ModelSpec, B: int) -> float:
    """Narayanan et al. 2021, eq. 3 (recomputation included)."""
    s, l, h, V = m.seq, m.layers, m.hidden, m.vocab
    return 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def paper_seconds(row: Published) -> float:
    """The paper's number as an iteration time."""
    m = PRESETS[row.model]
    if row.metric == "iteration_s":
        return row.value
    if row.metric == "gpu_hours_per_t_tokens":
        return row.global_batch * m.seq * row.value * 3600 / 1e12 / row.gpus
    if row.metric == "tokens_per_gpu_s":
        return row.global_batch * m.seq / (row.gpus * row.value)
    if row.source.startswith("Narayanan"):
        return narayanan_flops(m, row.global_batch) / (row.gpus * row.value * 1e12)
    return m.model_flops_per_token() * row.global_batch * m.seq / (row.gpus * row.value * 1e12)


@dataclass(kw_only=True, slots=True)
class Prediction:
    row: Published
    evaluated: Evaluated
    paper_s: float
    predicted_s: float
    chosen: dict = field(default_factory=dict)
    """The knobs the source left open and the planner chose."""
    fits: bool = True

    @property
    def error(self) -> float:
        return self.predicted_s / self.paper_s - 1


def predict(row: Published) -> Prediction:
    m = PRESETS[row.model]
    intra, inter = row.links or (None, None)
    rc = row.stated.get("recompute")
    modes = RECOMPUTE + ((rc,) if rc and rc not in RECOMPUTE else ())
    req = PlanRequest(model=m, cluster=make_cluster(row.gpu, row.gpus, 8, intra, inter), global_batch=row.global_batch,
                      stack=row.stack, dtype=row.dtype, flash_attention=row.flash_attention, dp_overlap=row.dp_overlap,
                      ep_overlap=row.ep_overlap or None, recompute_modes=modes, moe_dispatch=row.moe_dispatch)
    stated = row.stated
    cands = [lay for lay in layouts(req) if all(getattr(lay, k) == v for k, v in stated.items())]
    evs = [evaluate(req, lay, timed=False) for lay in cands]
    fit = [e for e in evs if e.time is not None]
    fits = bool(fit)
    if not fit:  # the planner thinks it does not fit: time the stated layout anyway
        base = {"mb": 1, "recompute": "full", "vpp": 1, "zero": 0, "sp": False}
        lay = Layout(**{**base, **stated})
        fit = [evaluate(req, lay, timed=True)]
    best = min(fit, key=lambda e: e.time.step_s)
    chosen = {k: getattr(best.layout, k) for k in ("mb", "vpp", "recompute", "sp", "zero") if k not in stated}
    return Prediction(row=row, evaluated=best, paper_s=paper_seconds(row), predicted_s=best.time.step_s, chosen=chosen,
                      fits=fits)


def predict_all(table: tuple[Published, ...] = TABLE) -> list[Prediction]:
    return [predict(r) for r in table]


def median_abs_error(preds: list[Prediction]) -> float:
    errs = sorted(abs(p.error) for p in preds)
    n = len(errs)
    return errs[n // 2] if n % 2 else (errs[n // 2 - 1] + errs[n // 2]) / 2
