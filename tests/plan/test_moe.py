"""The planner's mixture-of-experts, latent-attention and decoupled-head models: parameter counts
against the published configs (by hand from each config.json / torchtitan flavor), model FLOPs
from active parameters, expert parallelism in memory, communication and the search."""

from __future__ import annotations

import pytest

from workbench.format.errors import WorkbenchError
from workbench.hardware.systems import make_cluster
from workbench.plan.comm import collectives
from workbench.plan.layout import Layout, megatron_stack, parse_layout
from workbench.plan.memory import memory
from workbench.plan.model import parse_model
from workbench.plan.presets import PRESETS
from workbench.plan.search import PlanRequest, check_layout, layouts, plan
from workbench.plan.efficiency import Efficiencies
from workbench.plan.timing import step_time

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name, total, active", [
    ("qwen3-0.6b", 0.6e9, None), ("qwen3-4b", 4.0e9, None), ("qwen3-8b", 8.2e9, None),
    ("mixtral-8x7b", 46.7e9, 12.9e9),      # Mistral AI: 46.7B total, 12.9B active
    ("qwen3-30b-a3b", 30.5e9, 3.3e9),      # Qwen3-30B-A3B model card: 30.5B, 3.3B activated
    ("deepseek-v3-16b", 15.7e9, None),     # DeepSeek-V2-Lite: 15.7B
    ("deepseek-v2-236b", 236e9, 21e9),     # DeepSeek-V2: 236B, 21B activated
    ("deepseek-v3-671b", 671e9, 37e9),     # DeepSeek-V3: 671B (without MTP), 37B activated
])
def test_presets_have_the_published_parameter_counts(name, total, active):
    m = PRESETS[name]
    assert m.params() == pytest.approx(total, rel=0.01)
    if active:
        assert m.params_active() == pytest.approx(active, rel=0.03)
    else:
        assert m.params_active() == m.params() or m.moe


def test_qwen3_4b_by_hand_tied_once_and_head_dim_128():
    """Qwen3-4B's config.json: 36 blocks of h 2560, 32 heads and 8 kv heads of 128 (4096 ≠ 2560),
    q/k norms, SwiGLU 9728, V 151,936 tied. A tied table counted twice (+389M) or a head of
    2560 / 32 = 80 would miss this count."""
    h, a, kv, d, f, V, L = 2560, 32, 8, 128, 9728, 151936, 36
    block = h * a * d + 2 * h * kv * d + a * d * h + 2 * d + 3 * h * f + 2 * h
    assert PRESETS["qwen3-4b"].params() == L * block + V * h + h == 4_022_468_096
    m = PRESETS["qwen3-4b"]
    assert m.d_head == 128 and m.attn_out == 4096
    # the MFU's model FLOPs: the tied table counts once, as the head (no input table left out)
    assert m.model_flops_per_token() == 6 * m.params() + 6 * L * a * (d + d) * m.seq


def test_model_flops_count_active_experts_only():
    """Mixtral 8x7B by hand: every token runs 2 of 8 experts; the router and attention always."""
    m = PRESETS["mixtral-8x7b"]
    h, L, V, f, s = 4096, 32, 32000, 14336, m.seq
    attention = h * 4096 + 2 * h * 1024 + 4096 * h
    active_non_embedding = L * (attention + h * 8 + 2 * 3 * h * f + 2 * h) + h + V * h  # + final norm, head
    assert m.model_flops_per_token() == 6 * active_non_embedding + 6 * L * 32 * (128 + 128) * s
    # more experts at the same top_k cost only their router's FLOPs
    wider = parse_model("L=32,h=4096,a=32,kv=8,V=32000,s=4096,experts=16,top_k=2,moe_ffn=14336,gated=1,pos=0,bias=0,norm=rms")
    assert wider.model_flops_per_token() - m.model_flops_per_token() == 6 * L * h * 8
    assert wider.params() > 1.9 * m.params() - 20e9  # ... while its parameters nearly double


def test_latent_attention_flops_use_the_query_and_value_head_widths():
    m = PRESETS["deepseek-v3-16b"]
    assert (m.d_head, m.d_v, m.latent) == (192, 128, True)
    attention = m.model_flops_per_token() - 6 * m.params_active_non_embedding()
    assert attention == 6 * 27 * 16 * (192 + 128) * 4096
    # torchtitan's MLA with q projected directly: wq, wkv_a, kv_norm, wkv_b, wo (by hand)
    h = 2048
    assert m.attention_matrix_params() == h * 16 * 192 + h * (512 + 64) + 512 * 16 * (128 + 128) + 16 * 128 * h


def test_key_list_spells_a_mixture_of_experts_and_checks_it():
    m = parse_model("L=48,h=2048,a=32,kv=4,hd=128,V=151936,s=4096,experts=128,top_k=8,moe_ffn=768,gated=1,"
                    "pos=0,bias=0,norm=rms,qknorm=1")
    assert m.params() == PRESETS["qwen3-30b-a3b"].params() and m.moe_layers == 48
    d = parse_model("L=27,h=2048,a=16,hd=192,vhd=128,kv_lora=512,rope_hd=64,V=102400,s=4096,ffn=10944,experts=64,"
                    "top_k=6,shared=2,moe_ffn=1408,dense_layers=1,gated=1,pos=0,bias=0,norm=rms")
    assert d.params() == PRESETS["deepseek-v3-16b"].params()
    for bad, words in (("experts=8,top_k=9", "top_k 9"), ("top_k=2", "need experts"), ("experts=8", "top_k"),
                       ("experts=8,top_k=2,dense_layers=4", "dense_layers"), ("kv_lora=512,hd=64,rope_hd=64", "rope_hd")):
        with pytest.raises(WorkbenchError, match=words) as e:
            parse_model(f"L=4,h=512,a=8,V=1000,s=128,{bad}")
        assert "\n" not in str(e.value)
    with pytest.raises(WorkbenchError, match="hd="):
        parse_model("L=4,h=500,a=8,V=1000,s=128")
    assert parse_model("L=4,h=500,a=8,hd=64,V=1000,s=128").d_head == 64


def _ds16(layout: str):
    return PRESETS["deepseek-v3-16b"], parse_layout(layout), megatron_stack("bf16", flash_attention=True)


def test_expert_parallel_memory_by_hand():
    """dp 8 with ep 8 and ZeRO-1 (Megatron's 18 B/param): each GPU holds 8 of the 64 experts whole;
    the dense parameters' optimizer state is sharded over dp 8, the experts' over the dp·tp/ep = 1
    ranks that hold the same experts (none)."""
    m, lay, stack = _ds16("tp=1,pp=1,dp=8,zero=1,mb=1,ep=8")
    experts = 26 * 64 * 3 * 2048 * 1408 / 8
    dense = m.params() - 26 * 64 * 3 * 2048 * 1408
    b = memory(m, lay, stack, 64, 80e9)
    assert b.weights == pytest.approx(2 * (dense + experts))
    assert b.optimizer == pytest.approx(12 * (dense / 8 + experts))
    # ep 4: experts twice as many per GPU, their states sharded over the 2 ranks that share them
    b4 = memory(m, parse_layout("tp=1,pp=1,dp=8,zero=1,mb=1,ep=4"), stack, 64, 80e9)
    assert b4.optimizer == pytest.approx(12 * (dense / 8 + 2 * experts / 2))
    assert b4.weights == pytest.approx(2 * (dense + 2 * experts))


def test_all_to_all_dispatch_and_combine_by_hand():
    m, lay, stack = _ds16("tp=1,pp=1,dp=8,zero=1,mb=2,ep=8")
    calls = collectives(m, lay, stack, 64, make_cluster("H100", 8))
    a2a = [c for c in calls if c.group == "ep"]
    mbs = 64 // (8 * 2)
    assert {c.when for c in a2a} == {"forward", "backward"}
    for c in a2a:  # each rank's tokens x top_k rows of h in bf16, dispatch and combine, per MoE block
        assert (c.op, c.bytes, c.calls, c.ranks, c.link) == ("all_to_all", 2 * 4096 * 6 * 2048 * 2, 2 * 26 * mbs, 8,
                                                             "intra")
    assert not [c for c in calls if c.group == "edp"]  # every rank holds other experts: nothing to reduce
    calls4 = collectives(m, parse_layout("tp=1,pp=1,dp=8,zero=1,mb=2,ep=4"), stack, 64, make_cluster("H100", 8))
    assert {c.ranks for c in calls4 if c.group == "edp"} == {2}
    # across nodes (16 GPUs of 8 per node): the ep 16 group leaves the node
    lay16 = parse_layout("tp=1,pp=1,dp=16,zero=1,mb=2,ep=16")
    assert {c.link for c in collectives(m, lay16, stack, 64, make_cluster("H100", 16)) if c.group == "ep"} == {"inter"}


def test_deepseek_16b_on_8_h100_fits_with_expert_parallelism_in_the_search():
    req = PlanRequest(model=PRESETS["deepseek-v3-16b"], cluster=make_cluster("H100", 8), global_batch=256)
    p = plan(req)
    assert p.fitting > 0 and any(e.layout.ep > 1 for e in p.ranked)
    assert {lay.ep for lay in layouts(req)} == {1, 2, 4, 8}
    t = p.ranked[0].time
    # the MFU is the active-parameter convention's
    m = req.model
    assert t.mfu * t.step_s * 8 * 989e12 == pytest.approx(m.model_flops_per_token() * 256 * m.seq, rel=1e-9)


@pytest.mark.parametrize("layout, words", [("tp=1,pp=1,dp=8,ep=3", "does not divide the 64 experts"),
                                           ("tp=1,pp=2,dp=4,ep=8", "dp x tp = 4")])
def test_expert_parallel_degrees_that_cannot_run(layout, words):
    assert words in check_layout(PRESETS["deepseek-v3-16b"], parse_layout(layout), 64)
    assert "dense" in check_layout(PRESETS["llama3-8b"], Layout(dp=8, ep=2), 64)


def test_routed_experts_run_at_the_measured_grouped_gemm_share():
    m, lay, stack = _ds16("tp=1,pp=1,dp=8,zero=1,mb=1,ep=8")
    cl = make_cluster("H100", 8)
    fast, slow = (step_time(m, lay, stack, 64, cl, Efficiencies(expert_gemm=x)) for x in (0.8, 0.2))
    assert slow.compute_s > 1.3 * fast.compute_s
    dense = PRESETS["llama3-8b"]
    same = [step_time(dense, Layout(dp=8), stack, 64, cl, Efficiencies(expert_gemm=x)).step_s for x in (0.8, 0.2)]
    assert same[0] == same[1]  # a dense model has no routed experts
