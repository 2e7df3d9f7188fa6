"""Mixtures of experts and today's dense shapes, inferred from committed CPU traces against the
truth the training script printed for the model it built (benchmarks/hf_train.py: ``truth:`` in
each run's console.log; Hugging Face transformers 5.25 models from configs).

The runs (traces/README.md): ``moe_qwen3_cpu`` (8 routed experts, top-2, no shared expert, GQA,
head_dim 64 ≠ hidden 256 / 8 heads; its fused gate+up expert GEMM is exactly as wide as hidden),
``moe_qwen3_eager_cpu`` (the same model, experts as a loop of per-expert linears),
``moe_gpt_oss_cpu`` (top-2 of 8 experts with biases; attention as two matmuls with sinks, K/V repeated
to every head first),
``moe_mixtral_cpu`` (top-2 of 8, expert width 384), ``moe_olmoe_cpu`` (top-2 of 8),
``moe_deepseek_v3_cpu`` (latent attention with q/kv ranks 96/64, v_head_dim 24 ≠ qk 48, one shared
expert, a dense first layer, group-limited routing: three topk calls per layer), ``moe_qwen2_cpu``
(Qwen2-MoE: one shared expert 4 × an expert's width behind its own sigmoid gate, q/k/v with biases,
16 heads and 8 KV heads), ``dense_qwen3_cpu``
(8 heads × head_dim 64 = 512 ≠ hidden 320, tied embeddings, SwiGLU width 1216 = 3.8 × hidden).
"""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import TRACES
from workbench.analysis.flops import op_flops
from workbench.analysis.model import value
from workbench.analysis.steps import step_windows
from workbench.load.trace import read_trace
from workbench.pipeline.verdict import analyze_run

pytestmark = pytest.mark.committed

MOE = ["moe_qwen3_cpu", "moe_qwen3_eager_cpu", "moe_mixtral_cpu", "moe_olmoe_cpu", "moe_deepseek_v3_cpu", "moe_gpt_oss_cpu",
       "moe_qwen2_cpu"]
RUNS = [*MOE, "dense_qwen3_cpu"]
EXACT = ("experts", "top_k", "shared_experts", "moe_ffn", "moe_layers", "dense_layers", "head_dim", "v_head_dim", "heads",
         "kv_heads", "attention", "q_lora_rank", "kv_lora_rank", "ffn", "tied", "hidden", "layers", "vocab", "seq",
         "micro_batch", "params_embedding")


def truth(run: str) -> dict:
    return json.loads(re.search(r"^truth: (\{.*\})$", (TRACES / run / "console.log").read_text(), re.M).group(1))


_DOCS: dict[str, dict] = {}


def doc(run: str) -> dict:
    if run not in _DOCS:
        _DOCS[run] = analyze_run(TRACES / run).to_json()
    return _DOCS[run]


@pytest.mark.parametrize("run", RUNS)
def test_the_model_is_the_one_the_script_built(run):
    t, m = truth(run), doc(run)["model"]
    f = {k: x["value"] for k, x in m["fields"].items()}
    for k in EXACT + (("shared_ffn",) if "shared_ffn" in t else ()):
        assert f.get(k) == t.get(k), (k, f.get(k), t.get(k))
    assert f["params_total"] == pytest.approx(t["params_total"], rel=0.01)
    assert f["params_active"] == pytest.approx(t["params_active"], rel=0.10)
    assert f["model_flops_per_token"] == pytest.approx(t["model_flops_per_token"], rel=0.05)
    # gpt-oss repeats K/V to every head before its matmul attention: KV heads from the projections' width
    sure = {k: x["confidence"] for k, x in m["fields"].items() if not (run == "moe_gpt_oss_cpu" and k in ("kv_heads", "attention"))}
    assert set(sure.values()) == {"high"}, sure


@pytest.mark.parametrize("run", MOE)
def test_mfu_counts_active_experts_only(run):
    """The convention's 6·N is the active parameters': every routed expert counted would make the
    FLOPs per token far larger (here by 50–110 %)."""
    t, m = truth(run), doc(run)["model"]
    total, active, emb = (value(m, k) for k in ("params_total", "params_active", "params_embedding"))
    assert active < 0.75 * total
    L, h, q = value(m, "layers"), value(m, "heads"), value(m, "head_dim")
    v, s = value(m, "v_head_dim") or q, value(m, "seq")
    assert value(m, "model_flops_per_token") == 6 * (active - emb) + 6 * L * h * (q + v) * s
    # (gpt-oss's expert biases [E, width] look like its router's weight: counted as dense, +0.4 %)
    assert value(m, "model_flops_per_token") == pytest.approx(t["model_flops_per_token"], rel=0.005)
    eff = doc(run)["efficiency"]["mfu_by_convention"]
    assert eff["torchtitan"]["model_flops_per_token"] == value(m, "model_flops_per_token")
    # Megatron-LM halves causal attention: 3·L·h·(q + v)·s less
    assert eff["torchtitan"]["model_flops_per_token"] - eff["megatron"]["model_flops_per_token"] == 3 * L * h * (q + v) * s


def test_a_tied_table_counts_once_and_head_dim_is_not_hidden_over_heads():
    """dense_qwen3_cpu: the tied [2048, 320] table is one parameter (the output head), so the
    embedding parameters are 0 and the convention's N holds it once; head_dim 64, not 320 / 8 = 40;
    the MLP is 1216 wide, not the attention output projection's 512 = 8 × 64."""
    t, m = truth("dense_qwen3_cpu"), doc("dense_qwen3_cpu")["model"]
    assert value(m, "tied") is True and value(m, "params_total") == t["params_total"]
    assert value(m, "params_embedding") == 0 and value(m, "params_active") == value(m, "params_total")
    assert value(m, "head_dim") == 64 != value(m, "hidden") // value(m, "heads")
    assert value(m, "ffn") == 1216 and value(m, "gated") is True
    assert value(m, "model_flops_per_token") == 6 * t["params_total"] + 12 * 4 * 8 * 64 * 128
    assert "experts" not in m["fields"] and doc("dense_qwen3_cpu")["efficiency"]["moe"] is None
    # torchtitan's own count leaves the tied table out altogether (its "embedding" name filter)
    conv = doc("dense_qwen3_cpu")["efficiency"]["mfu_by_convention"]
    assert conv["nanogpt"]["model_flops_per_token"] == value(m, "model_flops_per_token")
    assert conv["torchtitan"]["model_flops_per_token"] == value(m, "model_flops_per_token") - 6 * 2048 * 320


def test_latent_attention_and_a_shared_expert():
    m = doc("moe_deepseek_v3_cpu")["model"]
    assert value(m, "attention") == "MLA" and (value(m, "head_dim"), value(m, "v_head_dim")) == (48, 24)
    assert (value(m, "q_lora_rank"), value(m, "kv_lora_rank")) == (96, 64)
    assert (value(m, "moe_layers"), value(m, "dense_layers"), value(m, "ffn")) == (3, 1, 512)
    assert value(m, "shared_experts") == 1 and value(m, "top_k") == 3
    assert "group-limited" in m["fields"]["top_k"]["source"]  # three topk calls per layer, the widest the experts'


def test_a_shared_expert_behind_its_own_gate_is_one_expert_of_its_width():
    """Qwen2-MoE: the shared MLP (512 wide, 4 × the experts' 128) is scaled by the sigmoid of a projection
    from hidden to one value per token: one shared expert of width 512, not four fused ones (DeepSeek's
    fused shared MLP has no such gate: its width over the expert width is their number)."""
    m = doc("moe_qwen2_cpu")["model"]
    assert (value(m, "shared_experts"), value(m, "shared_ffn"), value(m, "moe_ffn")) == (1, 512, 128)
    assert "gate of its own" in m["fields"]["shared_experts"]["source"]
    assert (value(m, "heads"), value(m, "kv_heads"), value(m, "attention")) == (16, 8, "GQA")
    d = doc("moe_deepseek_v3_cpu")["model"]
    assert (value(d, "shared_experts"), value(d, "shared_ffn")) == (1, 128)


def test_a_grouped_gemm_counts_once_per_expert_row_forward_and_backward():
    """moe_qwen3_cpu runs its experts as aten::_grouped_mm (per-expert aten::mm inside on CPU):
    per layer and step, gate+up [512, 256] × [8, 256, 256] and down [512, 128] × [8, 128, 256]
    forward, each twice again in backward (input and weight gradients). The per-expert loop of
    the same model (moe_qwen3_eager_cpu) executes the same FLOPs."""
    grouped = doc("moe_qwen3_cpu")["efficiency"]
    eager = doc("moe_qwen3_eager_cpu")["efficiency"]
    assert grouped["flops_per_step"] == pytest.approx(eager["flops_per_step"], rel=1e-9)
    per_layer = 3 * (2 * 512 * 256 * 256 + 2 * 512 * 128 * 256)
    t = read_trace(TRACES / "moe_qwen3_cpu" / "rank0.pt.trace.json.gz")
    o = op_flops(t, step_windows(t))
    g = o[o["name"] == "aten::_grouped_mm"]
    steps = sorted(s for s in g["step"].unique() if s >= 0)
    assert steps and all(g[g["step"] == s]["flops"].sum() == 4 * per_layer for s in steps)


@pytest.mark.parametrize("run", MOE)
def test_routing_and_dispatch_shares_and_what_the_trace_cannot_say(run):
    moe = doc(run)["efficiency"]["moe"]
    assert moe["source"] == "cpu ops"
    assert moe["expert_gemm_pct"] > 0 and 0 < moe["routing_pct"] < 10 and 0 < moe["dispatch_pct"] < 20
    load = doc(run)["model"]["expert_load"]
    if run == "moe_qwen3_eager_cpu":
        assert "per-expert loop" in load
    elif run == "moe_qwen2_cpu":  # made after the capture learnt to read the router's choices
        assert "recorded by the capture" in load
    else:
        assert "not in the trace" in load


def test_matmul_attention_gives_heads_head_dim_and_layers():
    """moe_gpt_oss_cpu has no attention kernel: aten::bmm [16, 128, 64] × [16, 64, 128] then
    [16, 128, 128] × [16, 128, 64] per layer, 16 = batch 2 × 8 heads. Taken pair by pair (a
    weighted-values bmm followed by the next layer's scores fits the pattern too: 7 per step)."""
    m = doc("moe_gpt_oss_cpu")["model"]
    assert (value(m, "heads"), value(m, "head_dim"), value(m, "layers"), value(m, "kv_heads")) == (8, 64, 4, 2)
    assert "matmul attention" in m["fields"]["heads"]["source"] and "ffn" not in m["fields"]


def test_a_gemm_of_another_width_before_the_first_attention_is_no_latent_attention():
    """case_cpu_0_baseline's data loader runs its per-sample transform (128-wide matmuls) on the
    main thread before the first attention: not a compressed KV, since no down-projection from
    hidden feeds it."""
    m = doc("case_cpu_0_baseline")["model"]
    assert value(m, "attention") == "MHA" and "kv_lora_rank" not in m["fields"]


def test_a_topk_over_the_logits_is_no_router():
    """tests/analysis/data/dense_qwen3_top5_cpu: the dense Qwen3-shaped model, its loop taking a
    top-5 accuracy (``aten::topk`` over [2, 127, 2048] logits) between forward and backward."""
    from tests.conftest import DATA

    run = DATA / "dense_qwen3_top5_cpu"
    m = analyze_run(run).model_json()
    assert "experts" not in m["fields"] and "top_k" not in m["fields"] and value(m, "ffn") == 1216
    assert value(m, "params_active") == value(m, "params_total") == json.loads(
        re.search(r"^truth: (\{.*\})$", (run / "console.log").read_text(), re.M).group(1))["params_total"]
    assert analyze_run(run).efficiency_json()["moe"] is None


def test_expert_parallelism_holds_a_share_of_the_experts_on_each_rank():
    """traces/moe_ep_cpu (tests/scripts/moe_ep.py, 2 gloo ranks): 4 routed experts, 2 on each rank
    (grouped GEMM weights [2, …]), tokens sent to their experts' rank by all-to-all. Each rank's
    gradients hold its own experts only: the model's parameters add the other rank's."""
    t, m = truth("moe_ep_cpu"), doc("moe_ep_cpu")["model"]
    assert value(m, "layout")["ep"] == t["ep"] == 2 and value(m, "experts") == 4 and value(m, "top_k") == 2
    assert value(m, "params_total") == t["params_total"] and value(m, "params_active") == t["params_active"]
    assert value(m, "moe_ffn") == t["moe_ffn"]


def test_the_engines_expert_parallel_moe_counts_every_expert_once():
    """traces/engine_moe_skewed (case_studies/engine/moe_tiny.toml: the tiny GPT, d 64, 2 blocks,
    vocab 256, seq 64, tied; 8 SwiGLU experts of 128 in both blocks, top-2, ep = 2 over 2 ranks).
    Each rank holds 4 experts: gradients [4, 64, 128] and [4, 128, 64], 32,768 elements each — as
    many as a [batch 8, seq 64, hidden 64] activation, which is not what they are. By hand: dense
    55,424 (tied table 256·64, positions 64·64, per block q/k/v/proj with biases 4·(64·64 + 64), two
    norms 4·64, a router 64·8; the final norm 2·64), routed 2 blocks × 8 × 3·64·128 = 393,216;
    active = 55,424 + 393,216 × 2 / 8."""
    m = doc("engine_moe_skewed")["model"]
    assert value(m, "layout")["ep"] == 2 and value(m, "experts") == 8 and value(m, "top_k") == 2
    assert value(m, "params_total") == 55_424 + 393_216 == 448_640
    assert value(m, "params_active") == 55_424 + 393_216 * 2 // 8 == 153_728
