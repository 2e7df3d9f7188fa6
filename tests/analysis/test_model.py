"""The model inferred from committed traces (workbench.analysis.model), field by field, against
what made them: the engine's manifests (its config is the true model), nanoGPT's and ResNet-50's
published parameter counts, the scripts' arguments (traces/README.md).

Parameter counts by hand: the engine's GPT block is q, k, v, proj (4·(d² + d)), fc (4d² + 4d),
proj (4d² + d) and two LayerNorms (4d): 12d² + 13d; the model adds the token table V·d (tied: the
head is that table), the position table S·d and the final norm 2d.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import TRACES
from workbench.analysis.model import CONVENTION, FIELDS, value
from workbench.verdict import analyze_run


def gpt_params(d: int, L: int, V: int, S: int, tied: bool) -> int:
    return L * (12 * d * d + 13 * d) + V * d * (1 if tied else 2) + S * d + 2 * d


def model_of(name: str) -> dict:
    return analyze_run(TRACES / name).model_json()


def v(m: dict, name: str):
    return value(m, name)


PLAN_GPU = ["plan_gpu_125m_b32", "plan_gpu_1p3b_b8", "plan_gpu_370m_b16", "plan_gpu_370m_b16_ac", "plan_gpu_370m_b16_zero3",
            "plan_gpu_370m_b32", "plan_gpu_370m_b32_ac", "plan_gpu_370m_b8_fp32", "gpu_fsdp2_370m"]


@pytest.mark.parametrize("run", PLAN_GPU)
def test_the_engine_gpu_runs_are_their_config(run):
    cfg = json.loads((TRACES / run / "manifest.json").read_text())["config"]
    mc, d = cfg["model"], cfg["model"]["d_model"]
    m = model_of(run)
    assert m["kind"] == "transformer" and m["convention"] == CONVENTION
    assert list(m["fields"]) == [k for k in FIELDS if k in m["fields"]]
    assert v(m, "layers") == mc["n_layer"] and v(m, "hidden") == d and v(m, "heads") == mc["n_head"]
    assert v(m, "head_dim") == d // mc["n_head"] and v(m, "kv_heads") == mc["n_head"]
    assert v(m, "ffn") == 4 * d and v(m, "gated") is False
    assert v(m, "vocab") == mc["vocab"] and v(m, "tied") is mc["tie_embeddings"] and v(m, "seq") == mc["seq_len"]
    assert v(m, "params_total") == gpt_params(d, mc["n_layer"], mc["vocab"], mc["seq_len"], mc["tie_embeddings"])
    assert v(m, "params_embedding") == mc["seq_len"] * d  # the position table; the tied table is the head
    assert v(m, "micro_batch") == cfg["data"]["batch_size"] and v(m, "micro_batches") == cfg["train"]["grad_accum"]
    assert v(m, "tokens_per_step") == v(m, "global_tokens_per_step") == cfg["data"]["batch_size"] * mc["seq_len"]
    # the convention's FLOPs are the engine's own (GPT.flops_per_token), to the FLOP
    assert v(m, "model_flops_per_token") == cfg["flops_per_token"]
    assert v(m, "dtype") == ("fp32" if cfg["parallel"]["mixed_precision"] == "fp32" else "bf16")
    assert v(m, "recompute") == ("full" if cfg["train"]["activation_checkpointing"] else "none")
    assert v(m, "optimizer") == "adamw" and "fused" in m["fields"]["optimizer"]["source"]
    fsdp = cfg["parallel"]["mode"] == "zero3"
    assert v(m, "layout") == {"world_size": 1, "dp": 1, "tp": 1, "pp": 1, "fsdp": fsdp, "zero": 3 if fsdp else 0}
    assert all(f["confidence"] == "high" for f in m["fields"].values())


def test_full_recomputation_re_runs_every_attention_and_most_gemms():
    """traces/plan_gpu_370m_b16_ac: every block checkpointed (non-reentrant). Each block's 6 GEMMs
    but its last (the MLP's down projection, 4d² of the block's 12d²... recompute stops once the
    saved tensors are back) and its attention re-run: (12d²−4d²)·2·T per block of the forward's
    GEMMs; the output head (2·d·V·T) is not recomputed."""
    m = model_of("plan_gpu_370m_b16_ac")
    f = m["fields"]["recompute"]
    assert "24 of 24 attention forwards" in f["source"]
    d, L, V, T, B = 1024, 24, 50304, 1024, 16
    tokens = B * T
    gemm = 2 * tokens * (12 * d * d + 13 * d - 4 * d * d - d)  # the recomputed GEMMs of one block (bias adds included)
    att = 4 * B * 16 * T * T * 64 / 2  # causal: the executed count halves it
    fwd = L * (2 * tokens * (12 * d * d + 13 * d) + att) + 2 * tokens * d * V
    assert v(m, "recompute_fraction") == pytest.approx(L * (gemm + att) / fwd, rel=0.01)


def test_mfu_counts_the_model_hfu_what_ran():
    """The recomputing run executes more FLOPs than the model needs: HFU > MFU by the recomputed
    forward; without recomputation HFU < MFU (the trace halves causal attention)."""
    ac = analyze_run(TRACES / "plan_gpu_370m_b16_ac").to_json()["efficiency"]
    plain = analyze_run(TRACES / "plan_gpu_370m_b16").to_json()["efficiency"]
    for eff in (ac, plain):
        assert eff["mfu_source"] == "model" and eff["mfu_convention"] == CONVENTION
    assert ac["hfu_pct"] > 1.1 * ac["mfu_pct"] and "full recomputation" in ac["mfu_note"]
    assert plain["hfu_pct"] < plain["mfu_pct"] and plain["mfu_note"] is None  # within 5 %
    # MFU = the engine's FLOPs per token × tokens per step / (job step × 989 TFLOP/s)
    doc = analyze_run(TRACES / "plan_gpu_370m_b16").to_json()
    step_s = doc["summary"]["step_ms"] / 1e3
    assert plain["mfu_pct"] == pytest.approx(100 * 2424926208 * 16 * 1024 / step_s / 989e12, rel=1e-3)
    assert doc["metrics"]["tokens_per_s"] == pytest.approx(16 * 1024 / step_s, rel=1e-3)
    assert doc["metrics"]["mfu_pct"] == pytest.approx(plain["mfu_pct"], rel=1e-3)


TINY = dict(d=64, L=2, V=256, S=64)


@pytest.mark.parametrize("run, layout, tied", [
    ("engine_ddp", {"world_size": 2, "dp": 2, "tp": 1, "pp": 1, "fsdp": False, "zero": 0}, True),
    ("engine_zero1", {"world_size": 2, "dp": 2, "tp": 1, "pp": 1, "fsdp": False, "zero": 1}, True),
    ("engine_zero2", {"world_size": 2, "dp": 2, "tp": 1, "pp": 1, "fsdp": True, "zero": 2}, True),
    ("engine_zero3", {"world_size": 2, "dp": 2, "tp": 1, "pp": 1, "fsdp": True, "zero": 3}, True),
    ("engine_tp", {"world_size": 2, "dp": 1, "tp": 2, "pp": 1, "fsdp": False, "zero": 0}, True),
    ("engine_pp_gpipe_m2", {"world_size": 2, "dp": 1, "tp": 1, "pp": 2, "fsdp": False, "zero": 0}, False),
    ("engine_pp_1f1b_m8", {"world_size": 2, "dp": 1, "tp": 1, "pp": 2, "fsdp": False, "zero": 0}, False),
])
def test_the_engine_cpu_layouts(run, layout, tied):
    cfg = json.loads((TRACES / run / "manifest.json").read_text())["config"]
    assert cfg["model"]["tie_embeddings"] is tied
    m = model_of(run)
    assert v(m, "layout") == layout
    assert v(m, "params_total") == gpt_params(TINY["d"], TINY["L"], TINY["V"], TINY["S"], tied)
    assert v(m, "layers") == 2 and v(m, "heads") == 4 and v(m, "hidden") == 64 and v(m, "ffn") == 256
    pp_mb = cfg["parallel"]["microbatches"] if layout["pp"] > 1 else 1
    assert v(m, "micro_batches") == pp_mb
    assert v(m, "micro_batch") * pp_mb == cfg["data"]["batch_size"]
    # tokens: each data-parallel replica its batch; tensor and pipeline ranks share theirs
    assert v(m, "global_tokens_per_step") == cfg["data"]["batch_size"] * 64 * layout["dp"]
    if layout["pp"] == 1:
        assert v(m, "tied") is tied


def test_nanogpt_is_gpt2_124m():
    """nanoGPT's train.py (bias=False): 124,373,760 parameters, of which it prints 123.59M (without
    the position table); its MFU formula is the convention, so the FLOPs per token are its own."""
    for run in ("corpus/nanogpt_bf16_gpu", "corpus/nanogpt_fp32_gpu"):
        m = model_of(run)
        assert v(m, "params_total") == 124_373_760 and v(m, "params_non_embedding") == 123_587_328
        assert (v(m, "layers"), v(m, "hidden"), v(m, "heads"), v(m, "vocab"), v(m, "seq")) == (12, 768, 12, 50304, 1024)
        assert v(m, "tied") is True and v(m, "micro_batch") == 12 and v(m, "micro_batches") == 4
        assert v(m, "tokens_per_step") == 12 * 1024 * 4
        assert v(m, "model_flops_per_token") == 6 * 123_587_328 + 12 * 12 * 12 * 64 * 1024
    assert v(model_of("corpus/nanogpt_fp32_gpu"), "dtype") == "tf32"


def test_hf_trainer_qwen2_is_a_gated_untied_llm():
    m = model_of("corpus/hf_trainer_gpu")
    assert m["kind"] == "transformer"
    assert (v(m, "layers"), v(m, "hidden"), v(m, "heads"), v(m, "head_dim"), v(m, "seq")) == (8, 512, 8, 64, 128)
    assert v(m, "gated") is True and v(m, "ffn") == 2048 and v(m, "tied") is False
    assert v(m, "micro_batch") == 8 and v(m, "tokens_per_step") == 8 * 128  # --per_device_train_batch_size 8
    assert v(m, "optimizer") == "adamw" and v(m, "dtype") == "bf16"


def test_lightning_transformer():
    """Lightning's demo Transformer (nn.Transformer, 2 encoder + 2 decoder layers: 6 attentions,
    d 200, 2 heads, batch 20 × bptt 35, WikiText-2's 6001-word vocabulary, plain SGD)."""
    m = model_of("corpus/lightning_transformer_gpu")
    assert (v(m, "layers"), v(m, "hidden"), v(m, "heads"), v(m, "vocab"), v(m, "seq"), v(m, "micro_batch")) == (6, 200, 2, 6001, 35, 20)
    assert v(m, "optimizer") == "sgd"
    assert v(m, "ffn") is None  # dim_feedforward = d: no projection back to hidden differs from the attention's


def test_resnet50_is_a_convnet():
    a = analyze_run(TRACES / "corpus/imagenet_resnet50_gpu")
    m = a.model_json()
    assert m["kind"] == "convnet" and v(m, "params_total") == 25_557_032  # torchvision's resnet50
    assert v(m, "micro_batch") == 128 and v(m, "optimizer") == "sgd"
    assert not set(m["fields"]) & {"layers", "hidden", "heads", "vocab", "seq", "tokens_per_step", "model_flops_per_token"}
    eff = a.to_json()["efficiency"]
    assert eff["mfu_source"] == "trace" and eff["mfu_pct"] == eff["hfu_pct"] and "convnet" in eff["mfu_note"]


@pytest.mark.parametrize("run, kind", [("public/tracelens_h100", "transformer"), ("public/tracelens_mi300x", "convnet"),
                                       ("public/hta_v100_ddp", "other"), ("public/hta_a100_nccl", None)])
def test_public_traces(run, kind):
    m = model_of(run)
    assert m["kind"] == kind
    if run == "public/tracelens_h100":  # BERT-small inference: no backward, so no passes, no tokens per step
        assert (v(m, "hidden"), v(m, "heads"), v(m, "vocab")) == (512, 8, 30522)
        assert v(m, "tokens_per_step") is None and v(m, "params_total") is None or m["fields"]["params_total"]["confidence"] == "low"
    if run == "public/tracelens_mi300x":  # a ResNet with activation checkpointing
        assert v(m, "recompute") == "full"
    if kind is None:  # no shapes: nothing guessed
        assert m["fields"] == {}


def test_compare_gains_mfu_rows_and_model_tokens():
    """``workbench compare`` on the 370M run and its recomputing twin: tokens/s from the model (the
    engine's steps CSVs count tokens too: the two agree), MFU rows for both, MFU falling with the
    step (the same model FLOPs), HFU falling less (the recomputed forward is executed work)."""
    from workbench.compare import compare_runs

    a, b = analyze_run(TRACES / "plan_gpu_370m_b16"), analyze_run(TRACES / "plan_gpu_370m_b16_ac")
    rows = compare_runs(a, b).metrics.set_index("metric")
    assert {"mfu_pct", "hfu_pct", "tokens_per_s"} <= set(rows.index)
    step = rows.loc["steady_step_ms"]
    assert rows.loc["mfu_pct", "b"] / rows.loc["mfu_pct", "a"] == pytest.approx(step["a"] / step["b"], rel=1e-3)
    assert rows.loc["hfu_pct", "delta_pct"] > rows.loc["mfu_pct", "delta_pct"]
    from workbench.verdict import model_tokens_per_s

    for an in (a, b):
        m = an.metrics()
        assert model_tokens_per_s(an.model_json(), m["steady_step_ms"]) == pytest.approx(m["tokens_per_s"], rel=1e-3)


def test_tokens_per_s_without_record_metrics():
    """nanoGPT counts no tokens for the workbench: tokens/s comes from the model (12 × 1024 × 4 per
    step over the job's step), within 1 % of its true tokens over its own timer's steps."""
    doc = analyze_run(TRACES / "corpus/nanogpt_bf16_gpu").to_json()
    s = doc["summary"]
    assert doc["metrics"]["tokens_per_s"] == pytest.approx(49152 / (s["step_ms"] / 1e3), rel=1e-3)
