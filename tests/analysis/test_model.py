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
from workbench.pipeline.verdict import analyze_run


def gpt_params(d: int, L: int, V: int, S: int, tied: bool) -> int:
    return L * (12 * d * d + 13 * d) + V * d * (1 if tied else 2) + S * d + 2 * d


def model_of(name: str) -> dict:
    return analyze_run(TRACES / name).model_json()


def v(m: dict, name: str):
    return value(m, name)


PLAN_GPU = ["plan_gpu_125m_b32", "plan_gpu_1p3b_b8", "plan_gpu_370m_b16", "plan_gpu_370m_b16_ac", "plan_gpu_370m_b16_zero3",
            "plan_gpu_370m_b32", "plan_gpu_370m_b32_ac", "plan_gpu_370m_b8_fp32", "gpu_fsdp2_370m"]


@pytest.mark.committed
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
    assert v(m, "layout") == {"world_size": 1, "dp": 1, "tp": 1, "pp": 1, "fsdp": fsdp, "zero": 3 if fsdp else 0, "ep": 1}
    assert all(f["confidence"] == "high" for f in m["fields"].values())


@pytest.mark.committed
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


@pytest.mark.committed
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


@pytest.mark.committed
@pytest.mark.parametrize("run, layout, tied", [
    ("engine_ddp", {"world_size": 2, "dp": 2, "tp": 1, "pp": 1, "fsdp": False, "zero": 0, "ep": 1}, True),
    ("engine_zero1", {"world_size": 2, "dp": 2, "tp": 1, "pp": 1, "fsdp": False, "zero": 1, "ep": 1}, True),
    ("engine_zero2", {"world_size": 2, "dp": 2, "tp": 1, "pp": 1, "fsdp": True, "zero": 2, "ep": 1}, True),
    ("engine_zero3", {"world_size": 2, "dp": 2, "tp": 1, "pp": 1, "fsdp": True, "zero": 3, "ep": 1}, True),
    ("engine_tp", {"world_size": 2, "dp": 1, "tp": 2, "pp": 1, "fsdp": False, "zero": 0, "ep": 1}, True),
    ("engine_pp_gpipe_m2", {"world_size": 2, "dp": 1, "tp": 1, "pp": 2, "fsdp": False, "zero": 0, "ep": 1}, False),
    ("engine_pp_1f1b_m8", {"world_size": 2, "dp": 1, "tp": 1, "pp": 2, "fsdp": False, "zero": 0, "ep": 1}, False),
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


@pytest.mark.committed
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


@pytest.mark.committed
def test_hf_trainer_qwen2_is_a_gated_untied_llm():
    m = model_of("corpus/hf_trainer_gpu")
    assert m["kind"] == "transformer"
    assert (v(m, "layers"), v(m, "hidden"), v(m, "heads"), v(m, "head_dim"), v(m, "seq")) == (8, 512, 8, 64, 128)
    assert v(m, "gated") is True and v(m, "ffn") == 2048 and v(m, "tied") is False
    assert v(m, "micro_batch") == 8 and v(m, "tokens_per_step") == 8 * 128  # --per_device_train_batch_size 8
    assert v(m, "optimizer") == "adamw" and v(m, "dtype") == "bf16"


@pytest.mark.committed
def test_lightning_transformer():
    """Lightning's demo Transformer (nn.Transformer, 2 encoder + 2 decoder layers: 6 attentions,
    d 200, 2 heads, batch 20 × bptt 35, WikiText-2's 6001-word vocabulary, plain SGD)."""
    m = model_of("corpus/lightning_transformer_gpu")
    assert (v(m, "layers"), v(m, "hidden"), v(m, "heads"), v(m, "vocab"), v(m, "seq"), v(m, "micro_batch")) == (6, 200, 2, 6001, 35, 20)
    assert v(m, "optimizer") == "sgd"
    assert v(m, "ffn") is None  # dim_feedforward = d: no projection back to hidden differs from the attention's


@pytest.mark.committed
def test_resnet50_is_a_convnet():
    a = analyze_run(TRACES / "corpus/imagenet_resnet50_gpu")
    m = a.model_json()
    assert m["kind"] == "convnet" and v(m, "params_total") == 25_557_032  # torchvision's resnet50
    assert v(m, "micro_batch") == 128 and v(m, "optimizer") == "sgd"
    assert not set(m["fields"]) & {"layers", "hidden", "heads", "vocab", "seq", "tokens_per_step", "model_flops_per_token"}
    eff = a.to_json()["efficiency"]
    assert eff["mfu_source"] == "trace" and eff["mfu_pct"] == eff["hfu_pct"] and "convnet" in eff["mfu_note"]


@pytest.mark.committed
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


@pytest.mark.committed
def test_compare_gains_mfu_rows_and_model_tokens():
    """``workbench compare`` on the 370M run and its recomputing twin: tokens/s from the model (the
    engine's steps CSVs count tokens too: the two agree), MFU rows for both, MFU falling with the
    step (the same model FLOPs), HFU falling less (the recomputed forward is executed work)."""
    from workbench.pipeline.compare import compare_runs

    a, b = analyze_run(TRACES / "plan_gpu_370m_b16"), analyze_run(TRACES / "plan_gpu_370m_b16_ac")
    rows = compare_runs(a.result(), b.result()).metrics.set_index("metric")
    assert {"mfu_pct", "hfu_pct", "tokens_per_s"} <= set(rows.index)
    step = rows.loc["steady_step_ms"]
    assert rows.loc["mfu_pct", "b"] / rows.loc["mfu_pct", "a"] == pytest.approx(step["a"] / step["b"], rel=1e-3)
    assert rows.loc["hfu_pct", "delta_pct"] > rows.loc["mfu_pct", "delta_pct"]
    from workbench.pipeline.verdict import model_tokens_per_s

    for an in (a, b):
        m = an.metrics()
        assert model_tokens_per_s(an.model_json(), m["steady_step_ms"]) == pytest.approx(m["tokens_per_s"], rel=1e-3)


@pytest.mark.committed
def test_tokens_per_s_without_record_metrics():
    """nanoGPT counts no tokens for the workbench: tokens/s comes from the model (12 × 1024 × 4 per
    step over the job's step), within 1 % of its true tokens over its own timer's steps."""
    doc = analyze_run(TRACES / "corpus/nanogpt_bf16_gpu").to_json()
    s = doc["summary"]
    assert doc["metrics"]["tokens_per_s"] == pytest.approx(49152 / (s["step_ms"] / 1e3), rel=1e-3)


# ---- a few events written by hand: what no committed trace has ----------------------------------

def _ev(name, ts, dur, tid=1, cat="cpu_op", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _shapes(*dims):
    return {"Input Dims": [list(d) for d in dims], "Input type": ["c10::BFloat16"] * len(dims), "Concrete Inputs": [""] * len(dims)}


def _megatron_cp_trace(tmp_path, rank: int):
    """One step of a Megatron-style rank: DP 2 × TP 2 × CP 2 groups (Megatron's group_desc), an
    embedding of [4, 512] tokens (this rank's half of each 1024-token sequence), two layers of the
    flash-attn package's attention (q [4, 512, 8, 64], k [4, 512, 2, 64]: GQA), a backward with
    two parameters' gradients."""
    import json as _json

    from workbench.load.trace import read_trace

    evs = [_ev("ProfilerStep#3", 0, 10_000, cat="user_annotation"),
           _ev("aten::embedding", 10, 5, **_shapes([16000, 1024], [4, 512], [], [], []))]
    for i in range(2):
        evs.append(_ev("flash_attn::_flash_attn_forward", 100 + 100 * i, 50, **_shapes([4, 512, 8, 64], [4, 512, 2, 64], [4, 512, 2, 64])))
    evs += [_ev("autograd::engine::evaluate_function: FlashAttnFuncBackward", 1000, 500, tid=2),
            _ev("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 2000, 10, tid=2),
            _ev("torch::autograd::AccumulateGrad", 2001, 5, tid=2, **_shapes([16000, 1024])),
            _ev("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 2100, 10, tid=2),
            _ev("torch::autograd::AccumulateGrad", 2101, 5, tid=2, **_shapes([1024]))]
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 8, "ranks": list(range(8))},
              {"pg_name": "1", "pg_desc": "TENSOR_MODEL_PARALLEL_GROUP", "pg_size": 2, "ranks": [0, 1]},
              {"pg_name": "2", "pg_desc": "CONTEXT_PARALLEL_GROUP", "pg_size": 2, "ranks": [0, 2]},
              {"pg_name": "3", "pg_desc": "DATA_PARALLEL_GROUP", "pg_size": 2, "ranks": [0, 4]}]
    f = tmp_path / f"rank{rank}.pt.trace.json"
    f.write_text(_json.dumps({"traceEvents": evs, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 8,
                                                                      "pg_config": groups}}))
    return read_trace(f)


@pytest.mark.unit
def test_flash_attn_package_and_megatron_groups_with_context_parallel(tmp_path):
    from workbench.analysis.frames import MODEL, RankFrames
    from workbench.analysis.model_run import run_model

    m = run_model({0: RankFrames.of_trace(_megatron_cp_trace(tmp_path, 0), 0)[MODEL]})
    f = {k: x["value"] for k, x in m["fields"].items()}
    assert m["kind"] == "transformer"
    assert f["layout"] == {"world_size": 8, "dp": 2, "tp": 2, "pp": 1, "fsdp": False, "zero": None, "ep": 1, "cp": 2}
    # heads are the rank's 8 of 16 (TP 2); KV heads 2 of 4 (GQA); head dim 64
    assert (f["heads"], f["kv_heads"], f["head_dim"]) == (16, 4, 64)
    # the sequence is each CP rank's half: 512 × 2; tokens: 4 × 512 here, × dp 2 × cp 2 for the job
    assert f["seq"] == 1024 and f["micro_batch"] == 4 and f["micro_batches"] == 1
    assert f["tokens_per_step"] == 4 * 512 and f["global_tokens_per_step"] == 4 * 512 * 2 * 2
    assert f["layers"] == 2  # two attention forwards in the one forward pass
    # one rank of the eight traced: its gradients × tp 2, and said to be a guess of low confidence
    assert f["params_total"] == 2 * (16000 * 1024 + 1024) and m["fields"]["params_total"]["confidence"] == "low"
    # the attention term counts the whole sequence: 12 × L × 16 × 64 × 1024
    n = m["fields"].get("params_non_embedding")
    assert n is None or f["model_flops_per_token"] == 6 * n["value"] + 12 * 2 * 16 * 64 * 1024


@pytest.mark.unit
def test_a_trace_without_shapes_guesses_nothing(tmp_path):
    import json as _json

    from workbench.analysis.frames import MODEL, RankFrames
    from workbench.analysis.model_run import run_model
    from workbench.load.trace import read_trace

    f = tmp_path / "rank0.pt.trace.json"
    f.write_text(_json.dumps({"traceEvents": [_ev("ProfilerStep#1", 0, 100, cat="user_annotation"), _ev("aten::mm", 10, 5)]}))
    m = run_model({0: RankFrames.of_trace(read_trace(f), 0)[MODEL]})
    assert m["kind"] is None and m["fields"] == {}


LLAMA_LINE = r"model: ([\d,]+) parameters \(([\d,]+) without the token embedding\), ([\d,]+) FLOPs per token, ([\d,]+) tokens per step"


@pytest.mark.committed
@pytest.mark.parametrize("run, recompute, accum, fsdp", [("llama_cpu_none", "none", 1, False),
                                                         ("llama_cpu_sel_accum2", "selective", 2, False),
                                                         ("llama_cpu_fsdp_full", "full", 1, True)])
def test_a_llama_shaped_trainer_is_its_own_print(run, recompute, accum, fsdp):
    """tests/scripts/llama_trainer.py prints its parameters and torchtitan's FLOPs per token (6 ×
    the parameters without the token embedding + 12·L·H·Q·T): the inferred model must say the same,
    with GQA (8 query, 2 KV heads), SwiGLU (gated, ffn 352), an untied head, and the recomputation it
    ran (selective: every second block, torchtitan's layer policy)."""
    import re

    from tests.conftest import DATA

    text = (DATA / run / "console.log").read_text()
    params, non_emb, fpt, tokens = (int(x.replace(",", "")) for x in re.search(LLAMA_LINE, text).groups())
    m = analyze_run(DATA / run).model_json()
    assert v(m, "params_total") == params and v(m, "params_non_embedding") == non_emb
    assert v(m, "model_flops_per_token") == fpt and v(m, "global_tokens_per_step") == tokens
    assert (v(m, "layers"), v(m, "hidden"), v(m, "heads"), v(m, "kv_heads"), v(m, "head_dim")) == (4, 128, 8, 2, 16)
    assert (v(m, "ffn"), v(m, "gated"), v(m, "vocab"), v(m, "tied")) == (352, True, 512, False)
    assert v(m, "micro_batches") == accum and v(m, "recompute") == recompute
    assert v(m, "layout")["fsdp"] is fsdp and v(m, "layout")["zero"] == (3 if fsdp else 0)
    assert v(m, "optimizer") == "adamw" and "foreach" in m["fields"]["optimizer"]["source"]
    if recompute == "selective":
        assert "4 of 8 attention forwards" in m["fields"]["recompute"]["source"]  # 2 of 4 layers, 2 passes


@pytest.mark.committed
def test_without_an_embedding_op_the_head_says_the_table(tmp_path):
    """A compiled graph gathers the token table with its own kernel: no aten::embedding in the
    trace. The untied head's [vocab, hidden] weight and the two gradients of that shape still say
    there is a token table of its own, so the convention's FLOPs stay the script's print (seq and
    batch from the attention's query)."""
    import gzip
    import json as _json
    import re

    from tests.conftest import DATA

    src = DATA / "llama_cpu_none"
    doc = _json.loads(gzip.decompress((src / "rank0.pt.trace.json.gz").read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != "aten::embedding"]
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank0.pt.trace.json").write_text(_json.dumps(doc))
    m = analyze_run(run, cache=False).model_json()
    params, non_emb, fpt, tokens = (int(x.replace(",", "")) for x in re.search(LLAMA_LINE, (src / "console.log").read_text()).groups())
    assert v(m, "vocab") == 512 and v(m, "tied") is False and m["fields"]["tied"]["confidence"] == "medium"
    assert v(m, "params_non_embedding") == non_emb and v(m, "model_flops_per_token") == fpt
    assert v(m, "seq") == 64 and v(m, "micro_batch") == 2 and v(m, "tokens_per_step") == tokens
