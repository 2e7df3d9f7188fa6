"""The trainers' recomputation modes in the planner (workbench.plan.recompute): what each keeps,
what each runs again, counted by hand from torchtitan v0.2.2's policy (activation_checkpoint.py:
the 1st, 3rd, 5th … ``aten.mm`` of a block and the SDPA outputs saved; grouped GEMMs recomputed)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from workbench.format.errors import WorkbenchError
from workbench.hardware.systems import make_cluster
from workbench.plan.activations import kept_per_token, layer_terms
from workbench.plan.efficiency import Efficiencies
from workbench.plan.layout import Layout, parse_layout, torch_stack
from workbench.plan.memory import memory
from workbench.plan.model import parse_model
from workbench.plan.presets import model_spec
from workbench.plan.recompute import checkpointed_in, modes_for, op_saved_matmuls, parse_recompute, share
from workbench.plan.timing import launch_factor, step_time

pytestmark = pytest.mark.unit

# Llama 3.2 3B's shape as torchtitan builds it: 28 x 3072, 24 heads of 128, 8 kv heads, SwiGLU 8192, untied
LLAMA_3B = parse_model("L=28,h=3072,a=24,kv=8,V=128256,s=8192,ffn=8192,gated=1,norm=rms,bias=0,pos=0")
TORCH = replace(torch_stack("bf16"), ddp_bucket_copy=False)  # one GPU, autocast over fp32 weights, no DDP


def test_op_level_saves_every_other_matmul_in_the_order_the_block_runs_them():
    # Llama: wq wk wv wo | w1 w3 w2 -> the 1st, 3rd, 5th, 7th
    assert [n for n, _, _ in op_saved_matmuls(LLAMA_3B, False, False)] == ["wq", "wv", "w1", "w2"]
    # DeepSeek 16B's MoE block: wq wkv_a wkv_b wo | shared w1 w3 w2 (the router's gate is force-recomputed
    # and not counted, the routed experts are grouped GEMMs, no mm)
    ds = model_spec("deepseek-v3-16b")
    assert [n for n, _, _ in op_saved_matmuls(ds, False, True)] == ["wq", "wkv_b", "w1", "w2"]
    assert [n for n, _, _ in op_saved_matmuls(ds, False, False)] == ["wq", "wkv_b", "w1", "w2"]
    # no shared expert (Qwen3-30B-A3B): q k v o
    assert [n for n, _, _ in op_saved_matmuls(model_spec("qwen3-30b-a3b"), False, True)] == ["wq", "wv"]


def test_op_level_keeps_the_input_the_saved_matmuls_and_attention_per_token():
    """Per token and block, bytes: the fp32 residual input 4·3072, wq 2·3072, wv 2·1024, w1 2·8192,
    w2 2·3072, the attention output 2·3072 and its fp32 log-sum-exp 4·24 = 49,248."""
    op = layer_terms(LLAMA_3B, TORCH, Layout(recompute="op")).bytes_per_token(LLAMA_3B, 8192, 1)
    assert op == 4 * 3072 + 2 * 3072 + 2 * 1024 + 2 * 8192 + 2 * 3072 + 2 * 3072 + 4 * 24 == 49_248
    none = layer_terms(LLAMA_3B, TORCH, Layout(recompute="none")).bytes_per_token(LLAMA_3B, 8192, 1)
    full = layer_terms(LLAMA_3B, TORCH, Layout(recompute="full")).bytes_per_token(LLAMA_3B, 8192, 1)
    assert full == 4 * 3072 < op < none / 2


def test_layer_frequency_recomputes_every_nth_block_as_torchtitan_counts_them():
    assert checkpointed_in("layer:2", 0, 28) == (14, 0)
    assert checkpointed_in("layer:3", 0, 28) == (9, 0)      # blocks 2, 5, … 26
    assert checkpointed_in("layer:3", 0, 2) == (0, 0)
    assert checkpointed_in("full", 3, 5) == (5, 0)
    lay = Layout(recompute="layer:2")
    none, full = (kept_per_token(LLAMA_3B, TORCH, lay, m) for m in ("none", "full"))
    assert kept_per_token(LLAMA_3B, TORCH, lay, "layer:2") == pytest.approx((none + full) / 2)
    peaks = [memory(LLAMA_3B, Layout(recompute=m), TORCH, 1, 80 * 2**30).total for m in ("none", "layer:2", "op", "full")]
    assert peaks == sorted(peaks, reverse=True)


def test_what_each_mode_runs_again():
    # op: the 2nd, 4th, 6th matmuls by FLOPs (wk 3072·1024, wo 3072², w3 3072·8192 of the block's
    # 2·3072² + 2·3072·1024 + 3·3072·8192), every memory-bound kernel, no attention, every routed expert
    h, kv, f = 3072, 1024, 8192
    s = share(LLAMA_3B, "op", False)
    assert s.gemm == pytest.approx((h * kv + h * h + h * f) / (2 * h * h + 2 * h * kv + 3 * h * f))
    assert (s.attention, s.memory, s.routed, s.comm) == (0.0, 1.0, 1.0, 0.0)
    assert share(LLAMA_3B, "selective", False).attention == 1.0 and share(LLAMA_3B, "selective", False).gemm == 0.0
    assert share(LLAMA_3B, "full", False).gemm == 1.0
    c = make_cluster("H100", 1, 1)
    t = {m: step_time(LLAMA_3B, Layout(recompute=m), TORCH, 1, c, Efficiencies()) for m in ("none", "op", "layer:2", "full")}
    assert t["none"].recompute_s == 0 < t["op"].recompute_s < t["layer:2"].recompute_s < t["full"].recompute_s
    assert t["none"].step_s < t["op"].step_s < t["full"].step_s
    # the FLOPs the GPU runs grow by the recomputed matmuls (HFU x step), the model's FLOPs (MFU x step) do not
    hw = {m: x.hfu * x.step_s for m, x in t.items()}
    assert hw["none"] < hw["op"] < hw["layer:2"] < hw["full"]
    assert t["none"].mfu * t["none"].step_s == pytest.approx(t["full"].mfu * t["full"].step_s)
    assert launch_factor(LLAMA_3B, Layout(recompute="full"), TORCH, 0) == pytest.approx(1.33)
    assert launch_factor(LLAMA_3B, Layout(recompute="layer:2"), TORCH, 0) == pytest.approx(1 + 0.33 / 2)


def test_layouts_spell_the_modes():
    assert parse_layout("tp=1,recompute=op").recompute == "op"
    assert parse_layout("recompute=layer:2").key().endswith("recompute=layer:2,sp=0")
    assert parse_recompute("LAYER:1") == "full" and parse_recompute("hf") == "full"
    for bad in ("layer:0", "layer:x", "sac", "layer:"):
        with pytest.raises(WorkbenchError, match="recompute must be one of"):
            parse_recompute(bad)
    with pytest.raises(WorkbenchError):
        Layout(recompute="layer:1")  # spelled full


def test_the_modes_a_trainer_offers():
    assert modes_for("torchtitan") == ("none", "op", "layer:2", "full")
    assert modes_for("hf_trainer") == ("none", "layer:2", "full")
    assert modes_for("engine") == ("none", "selective", "full")
    assert modes_for(None) == ("none", "selective", "full")
    # a run whose policy only torchtitan has is planned among torchtitan's modes; its own always among them
    assert modes_for(None, "op") == ("none", "op", "layer:2", "full")
    assert modes_for(None, "layer:4") == ("none", "op", "layer:2", "full", "layer:4")
