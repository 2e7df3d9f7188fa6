"""The routed experts' time terms (workbench/plan/moe_time.py): grouped-GEMM efficiency by expert
size, the dispatch and combine by dispatcher, routing and link, load imbalance, overlap's cost, and
a ZeRO-3 job without expert parallelism (active experts computed, every expert gathered)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from workbench.hardware.systems import make_cluster
from workbench.plan.comm import collectives, overlap_cost
from workbench.plan.efficiency import Efficiencies
from workbench.plan.layout import Layout, megatron_stack, torch_stack
from workbench.plan.moe_time import ep_call_bytes, ep_exposed_seconds, grouped_gemm_seconds, groups_reached
from workbench.plan.presets import PRESETS
from workbench.plan.timing import step_time

pytestmark = pytest.mark.unit

PEAK = 989e12
H100 = make_cluster("H100", 64)


def _share(rows: int, n: int, k: int) -> float:
    return 2.0 * rows * n * k / (PEAK * grouped_gemm_seconds(rows, n, k, 1, PEAK))


def test_grouped_gemm_reproduces_the_two_measured_rates():
    """torchtitan's grouped GEMMs on one H200: 43 % of peak for Qwen3-30B-A3B's experts (512 rows x
    768 x 2048), 51 % for DeepSeek 16B's (768 x 1408 x 2048): the two points the constants come from."""
    assert _share(512, 768, 2048) == pytest.approx(0.43, abs=0.005)
    assert _share(768, 1408, 2048) == pytest.approx(0.51, abs=0.005)


def test_narrow_experts_run_slower_per_flop_than_wide_ones():
    """Qwen3-30B-A3B's 768-wide experts at 512 rows well below DeepSeek-V3's 2048 x 7168 at 8192 rows,
    which runs near the grouped ceiling; both below a dense matmul's default 80 %."""
    narrow, wide = _share(512, 768, 2048), _share(8192, 2048, 7168)
    assert narrow < 0.45 < 0.55 < wide < 0.80


def test_step_times_routed_experts_by_their_width():
    """The same routed FLOPs in fewer, wider experts take less time: top 4 of 64 experts of 1536 against
    top 16 of 256 of 384 (the same routed parameters per token)."""
    base = PRESETS["qwen3-30b-a3b"]
    wide = replace(base, name="wide", experts=64, top_k=4, moe_ffn=1536)
    narrow = replace(base, name="narrow", experts=256, top_k=16, moe_ffn=384)
    assert wide.top_k * wide.expert_params() == narrow.top_k * narrow.expert_params()
    lay = Layout(dp=8, ep=8, zero=1)
    stack, cl = megatron_stack("bf16", flash_attention=True, dp_overlap=True), make_cluster("H100", 8)
    t_wide, t_narrow = (step_time(m, lay, stack, 64, cl, Efficiencies()).gemm_s for m in (wide, narrow))
    assert t_narrow > 1.05 * t_wide


def test_groups_reached_matches_enumeration():
    """Random routing: the expected distinct groups among every choice of top_k experts, counted."""
    for experts, groups, k in ((8, 4, 2), (12, 3, 3), (16, 4, 4)):
        size = experts // groups
        combos = list(itertools.combinations(range(experts), k))
        exact = sum(len({e // size for e in c}) for c in combos) / len(combos)
        assert groups_reached(experts, groups, k) == pytest.approx(exact)
    # NeMo AutoModel's fake balanced gate: 8 consecutive of 256 experts, 4 per rank -> 2 ranks, 1 node of 8
    assert groups_reached(256, 64, 8, "contiguous") == 2.0
    assert groups_reached(256, 8, 8, "contiguous") == 1.0
    assert groups_reached(64, 1, 6) == 1.0


def test_deepep_sends_a_token_once_per_node_over_the_network():
    """DeepSeek-V3 on 8 nodes (ep 64): NCCL's all-to-all sends top_k rows, 7/8 of them off the node;
    DeepEP once per remote node it reaches (5.3 of 8 nodes at random, 1 under the fake balanced gate)."""
    m, lay = PRESETS["deepseek-v3-671b"], Layout(pp=4, dp=64, ep=64, zero=3)
    row = 4096 * 7168 * 2
    nccl = torch_stack("bf16", zero=3)
    _, inter = ep_call_bytes(m, lay, nccl, H100)
    assert inter == pytest.approx(row * 8 * 56 / 64)
    _, deepep = ep_call_bytes(m, lay, replace(nccl, ep_dispatcher="deepep"), H100)
    assert deepep == pytest.approx(row * groups_reached(256, 8, 8) * 7 / 8) and deepep < 0.7 * inter
    _, balanced = ep_call_bytes(m, lay, replace(nccl, ep_dispatcher="deepep", ep_routing="contiguous"), H100)
    assert balanced == pytest.approx(row * 7 / 8)
    _, limited = ep_call_bytes(m, lay, replace(nccl, ep_dispatcher="deepep", ep_node_limit=4), H100)
    assert limited == pytest.approx(row * 4 * 7 / 8)


def test_all_to_all_over_two_nodes_sends_half_over_the_network():
    """ep 16 on 8-GPU nodes: a rank's rows for the 7 other ranks of its node go over NVLink, the 8 of the
    other node over the NIC, not all 15 over the NIC."""
    m, lay = PRESETS["qwen3-235b-a22b"], Layout(dp=16, ep=16, zero=1)
    intra, inter = ep_call_bytes(m, lay, megatron_stack("bf16"), H100)
    rows = 4096 * 8 * 4096 * 2
    assert intra == pytest.approx(rows * 7 / 16) and inter == pytest.approx(rows * 8 / 16)


def test_load_imbalance_raises_the_step_under_expert_parallelism_only():
    m, cl = PRESETS["qwen3-30b-a3b"], make_cluster("H100", 8)
    stack = megatron_stack("bf16", flash_attention=True, dp_overlap=True)
    ep8, ep1 = Layout(dp=8, ep=8, zero=1), Layout(dp=8, zero=1)
    t = {x: step_time(m, ep8, replace(stack, ep_imbalance=x), 64, cl, Efficiencies()) for x in (1.0, 1.5)}
    assert t[1.5].step_s > t[1.0].step_s * 1.1
    assert t[1.5].ep_comm_s == pytest.approx(1.5 * t[1.0].ep_comm_s, rel=0.01)
    same = [step_time(m, ep1, replace(stack, ep_imbalance=x), 64, cl, Efficiencies()).step_s for x in (1.0, 1.5)]
    assert same[0] == same[1]


def test_overlapped_dispatch_costs_the_sms_it_holds():
    """Fully hidden behind the other micro-batch, dispatch and combine still slow its kernels by the
    20 SMs they hold of 132; without overlap they are all exposed."""
    stack = megatron_stack("bf16")
    assert ep_exposed_seconds(1.0, 5.0, stack, H100) == 1.0
    hidden = ep_exposed_seconds(1.0, 5.0, replace(stack, ep_overlap=True), H100)
    assert hidden == pytest.approx(20 / 112)
    assert ep_exposed_seconds(3.0, 1.0, replace(stack, ep_overlap=True), H100) == pytest.approx(2.0 + 20 / 112)


def test_zero3_without_expert_parallelism_computes_active_experts_and_gathers_all():
    """gpt-oss-120b under FSDP2 on 64 GPUs, ep 1: each GPU's matmul FLOPs are the active experts'
    (top 4 of 128), while its ZeRO-3 gathers bring every expert's weights, forward and backward."""
    m, lay = PRESETS["gpt-oss-120b"], Layout(dp=64, zero=3, mb=2)
    stack = torch_stack("bf16", zero=3)
    t = step_time(m, lay, stack, 512, H100, Efficiencies())
    tokens = 512 * m.seq / 64
    active_fwd = 2.0 * m.layers * (m.attention_matrix_params() + m.hidden * m.experts + m.top_k * m.expert_params())
    dense_fwd = 2.0 * m.layers * (m.attention_matrix_params() + m.hidden * m.experts + m.experts * m.expert_params())
    gemm_hw = t.hfu * t.step_s * 64 * H100.gpu.peak_flops("bf16") / 64 / tokens  # per token, every pass
    assert gemm_hw < 4 * (active_fwd + 2.0 * m.hidden * m.vocab) + 4 * m.attention_flops(m.seq) * m.layers
    assert gemm_hw < 0.2 * 3 * dense_fwd
    gathered = sum(c.bytes_per_step for c in collectives(m, lay, stack, 512, H100) if c.op == "all_gather")
    assert gathered >= 2 * 2 * (m.blocks_params()) * (512 // (64 * 2)) * 0.99


def test_hidden_data_parallel_traffic_costs_the_sms_it_holds():
    """ZeRO-3's gathers hidden behind compute still slow it by the SMs they hold: 20 / (SMs − 20) of
    the hidden time (an A100 has 108 SMs, an H100 132). Llama 3 8B over 8 GPUs of one node: its gathers
    hide behind compute entirely, yet a sixth of them shows in the exposed time (before: the last call)."""
    assert overlap_cost(1.0, make_cluster("A100", 8)) == pytest.approx(20 / 88)
    assert overlap_cost(1.0, H100) == pytest.approx(20 / 112)
    cl = make_cluster("H100", 8)
    t = step_time(PRESETS["llama3-8b"], Layout(dp=8, zero=3), torch_stack("bf16", zero=3), 64, cl, Efficiencies())
    assert t.dp_comm_s < 0.5 * t.compute_s
    assert t.dp_exposed_s >= overlap_cost(0.9 * t.dp_comm_s, cl)
