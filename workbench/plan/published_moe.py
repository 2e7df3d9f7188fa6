"""Published mixture-of-experts training runs, each with its source, the layout it states and what it
measured: the table ``benchmarks/plan_published.py`` prints and ``tests/plan/test_published_moe.py``
holds the planner to. A row is ``fit`` (the planner's MoE defaults were chosen looking at it) or
``held_out`` (never looked at while choosing them): the accuracy is reported on the held-out rows.

Sources (BF16 runs; DeepSeek-V3's FP8 report row is in :mod:`workbench.plan.published`):

- NVIDIA NeMo AutoModel, "Performance Summary", pre-training on DGX-H100, BF16
  (docs.nvidia.com/nemo/automodel, performance-summary; PyTorch FSDP2 with expert parallelism over
  DeepEP and Transformer Engine kernels): time per global step, layout (TP, PP, CP, EP, VP, FSDP),
  global and micro batch, sequence 4,096.
- NVIDIA Megatron-Bridge, its performance summary page, 25.11 container, DGX-H100, BF16 (Megatron-Core):
  tokens per second per GPU and the layout.
- Megatron-MoE-ModelZoo (github yanring/Megatron-MoE-ModelZoo, the Megatron-Core MoE team's),
  its Qwen3 best-practice readme: Qwen3-235B-A22B on 256 H100, BF16, step times per layout and
  dispatcher (DeepEP, all-to-all), with and without the A2A overlap of 1F1B; its model config
  (``model_configs/benchmarking/Qwen3-235B-A22B.yaml``) runs sequence parallelism and expert tensor
  parallelism 1 (the table's ETP column).
- pytorch/torchtitan issue #1789 (2025-10-02): DeepSeek-V3 16B on 8 × H100 80 GB with its shipped
  config (FSDP 8, EP 8, op-level selective recomputation, seq 4,096): local batch 8 ran out of memory,
  local batch 4 ran at 11,636 tokens/s per GPU and 73.32 GiB peak reserved (torchtitan's print).
- The DeepSeek-V2 and V3 reports (:data:`workbench.plan.published.MOE`).

Megatron-Bridge's benchmarks force-balance the routing ("we force-balance the token distribution among
experts": Megatron-Core's ``--moe-router-force-load-balancing`` draws random logits); the ModelZoo's
Qwen3 step-time table does not say (its long-context table gives both: forced balance 1.09–1.25×
the TFLOP/s of dropless routing), planned balanced; AutoModel's benchmarks force it too (its notes: "Fake balanced gate is enabled to simulate ideal expert
routing"; ``FakeBalancedGate`` gives token i the experts i·top_k … i·top_k + top_k − 1, so a token's
experts sit on one or two ranks); torchtitan's routes as trained. AutoModel's table leaves EP blank
("-") for gpt-oss; the recipe it links for the row (``examples/benchmark/configs/gptoss_{20b,120b}_te_deepep.yaml``
at the table's commit 89e3a9f, 2025-10-06) sets ``ep_size`` 8 and 16 and activation checkpointing on
and off: taken from there, as the recomputation of every AutoModel row is (DeepSeek-V3, Kimi K2,
Qwen3-30B-A3B: on).
"""

from __future__ import annotations

from workbench.plan.published import H100, MOE, Published

AUTOMODEL = "NeMo AutoModel performance summary (DGX-H100, BF16)"
BRIDGE = "Megatron-Bridge performance summary, 25.11 (DGX-H100, BF16)"
ZOO = "Megatron-MoE-ModelZoo, best_practice/Qwen3 (256 x H100, BF16)"
TITAN = "pytorch/torchtitan issue #1789 (8 x H100 80GB)"


AUTOMODEL_DISPATCH = {"ep_dispatcher": "deepep", "ep_routing": "contiguous"}
"""DeepEP (``enable_deepep: true``) under the fake balanced gate (consecutive experts per token)."""
DEEPEP = {"ep_dispatcher": "deepep"}


def _automodel(model: str, gpus: int, gbs: int, mbs: int, pp: int, ep: int, vpp: int, step_s: float,
               split: str, recompute: str = "full", note: str = "FSDP2 + DeepEP") -> Published:
    # FSDP2 shards over the data-parallel ranks (TP 1, CP 1): dp = GPUs / PP; EP carved from them
    stated = {"tp": 1, "pp": pp, "dp": gpus // pp, "mb": mbs, "zero": 3, "ep": ep, "recompute": recompute}
    if pp > 1:
        stated["vpp"] = vpp
    return Published(source=AUTOMODEL, model=model, gpu=H100, gpus=gpus, global_batch=gbs, stated=stated,
                     metric="iteration_s", value=step_s, dtype="bf16", stack="torch", flash_attention=True,
                     dp_overlap=True, note=note, split=split, moe_dispatch=AUTOMODEL_DISPATCH)


def _zoo(tp: int, ep: int, pp: int, vpp: int, dp: int, mbs: int, recompute: str, step_s: float, split: str,
         overlap: bool = False, note: str = "", fsdp: bool = False) -> Published:
    # the distributed optimizer (ZeRO-1), or Megatron-FSDP (its FSDP column "On": parameters sharded too)
    # sequence parallel on, experts not split over tp: the ModelZoo's model_configs/benchmarking/Qwen3-235B-A22B.yaml
    # (--sequence-parallel true, --expert-tensor-parallel-size 1; the table's ETP column: 1)
    stated = {"tp": tp, "pp": pp, "dp": dp, "mb": mbs, "ep": ep, "recompute": recompute, "zero": 3 if fsdp else 1,
              "sp": True}
    if pp > 1:
        stated["vpp"] = vpp
    return Published(source=ZOO, model="qwen3-235b-a22b", gpu=H100, gpus=256, global_batch=2048, stated=stated,
                     metric="iteration_s", value=step_s, dtype="bf16", flash_attention=True, dp_overlap=True,
                     ep_overlap=overlap, note=note, split=split, moe_dispatch=DEEPEP if "DeepEP" in note else None)


TITAN_16B_IMBALANCE = 2.55
"""The busiest of 8 expert-parallel ranks' token copies over the mean, per MoE layer, for torchtitan's
DeepSeek 16B routing in its first steps from scratch (the issue's tps is its step-10 print): measured
on this repository's own run of the model's layers under torchtitan (``traces/corpus/torchtitan_dsv3_16b_gpu``,
steps 8–10, its ``experts_rank0.csv`` grouped as 8 ranks of 8 consecutive experts: 2.546), printed by
``python -m benchmarks.plan_published``."""
TITAN_16B_RUN = "traces/corpus/torchtitan_dsv3_16b_gpu"

ROWS: tuple[Published, ...] = (
    *MOE,
    _automodel("deepseek-v3-671b", 1024, 8192, 1, 4, 64, 8, 37.87, "held_out"),
    _automodel("deepseek-v3-671b", 256, 512, 1, 4, 64, 8, 8.18, "fit"),
    _automodel("kimi-k2", 256, 512, 1, 8, 32, 4, 8.86, "held_out"),
    _automodel("qwen3-30b-a3b", 8, 512, 4, 1, 8, 1, 21.773, "fit"),
    _automodel("gpt-oss-20b", 8, 256, 2, 1, 8, 1, 10.04, "held_out", note="FSDP2 + DeepEP; EP 8 from its recipe"),
    _automodel("gpt-oss-120b", 64, 512, 2, 1, 16, 1, 4.30, "held_out", recompute="none",
               note="FSDP2 + DeepEP; EP 16, no recomputation from its recipe"),
    Published(source=BRIDGE, model="gpt-oss-120b", gpu=H100, gpus=64, global_batch=512,
              stated={"tp": 1, "pp": 4, "dp": 16, "mb": 4, "ep": 8, "vpp": 1, "zero": 1}, metric="tokens_per_gpu_s",
              value=5630, dtype="bf16", flash_attention=True, dp_overlap=True, note="Megatron-Core, forced balance",
              split="held_out"),
    # ModelZoo's table: TP | CP | EP | PP | EDP | ETP | VPP | DP | FSDP | MBS | GBS | GA | recompute
    _zoo(2, 32, 8, 4, 16, 1, "selective", 19.7, "fit", note="DeepEP; recompute norm, act"),
    _zoo(2, 32, 8, 4, 16, 1, "selective", 17.6, "held_out", overlap=True, note="DeepEP, 1F1B A2A overlap; recompute norm, act"),
    _zoo(2, 8, 1, 1, 128, 4, "full", 17.6, "held_out", note="DeepEP, Megatron FSDP; full recompute", fsdp=True),
    _zoo(2, 8, 32, 3, 4, 1, "selective", 24.2, "held_out", note="all-to-all dispatcher; recompute norm, act"),
    _zoo(4, 8, 8, 4, 8, 1, "none", 29.0, "held_out", note="DeepEP"),
    Published(source=TITAN, model="deepseek-v3-16b", gpu=H100, gpus=8, global_batch=32,
              stated={"tp": 1, "pp": 1, "dp": 8, "mb": 4, "ep": 8, "zero": 3, "recompute": "op"},
              metric="tokens_per_gpu_s", value=11636, dtype="bf16", stack="torch", flash_attention=True,
              dp_overlap=True, note="torchtitan's 16B config, local batch 4; routing as trained from scratch",
              memory_gib=73.32, split="held_out", moe_dispatch={"ep_imbalance": TITAN_16B_IMBALANCE}),
)
"""The published MoE runs (DeepSeek's two reports first)."""

OUT_OF_MEMORY: tuple[Published, ...] = (
    Published(source=TITAN, model="deepseek-v3-16b", gpu=H100, gpus=8, global_batch=64,
              stated={"tp": 1, "pp": 1, "dp": 8, "mb": 8, "ep": 8, "zero": 3, "recompute": "op"},
              metric="iteration_s", value=0.0, dtype="bf16", stack="torch", flash_attention=True, dp_overlap=True,
              note="torchtitan's 16B config as shipped, local batch 8: out of memory", split="held_out"),
)
"""Published runs that ran out of memory: the planner must say they do not fit."""
