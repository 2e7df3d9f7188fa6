"""The model inferred from runs of a public trainer nobody here wrote — Hugging Face's Trainer
(``tests/trainer/distributed/scripts/train.py``, unmodified) on models of today's families — against
the truth of the model directory it loaded (``truth.json`` beside each run: the config and the
parameters counted from the model object that was saved, benchmarks/corpus_hf.py).

The runs (traces/README.md, "Corpus of public scripts"): ``hf_trainer_qwen3_moe_cpu`` (16 routed
experts, top-4, no shared expert, heads × head_dim = 2 × hidden), ``hf_trainer_deepseek_v3_cpu``
(latent attention, one shared expert, a dense first layer, group-limited routing),
``hf_trainer_olmoe_cpu`` (64 experts, top-8, MHA) and ``hf_trainer_qwen3_cpu`` (dense, Qwen3-0.6B's
proportions: head_dim 32 ≠ hidden 128 / 8 heads, tied embeddings, SwiGLU width 3 × hidden); and
``hf_trainer_{qwen3,deepseek_v3}_eager_ac_cpu``, the same two models with the script's eager (matmul)
attention, 2 accumulated micro-batches and the Trainer's gradient checkpointing.
Tolerances are the acceptance's: the shape exact, ``params_total`` 1 %, ``params_active`` 10 %,
model FLOPs per token 5 % of the convention (docs/model.md) computed here from the truth.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import TRACES
from tests.pipeline.test_corpus import COMMITTED, TABLE
from workbench.pipeline.verdict import analyze_run

CORPUS_RUNS = TRACES / "corpus"
TRUTH_RUNS = [n for n in COMMITTED if (CORPUS_RUNS / n / "truth.json").exists()]
EXACT = ("experts", "top_k", "shared_experts", "moe_ffn", "moe_layers", "dense_layers", "head_dim", "v_head_dim",
         "heads", "kv_heads", "attention", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "ffn", "gated", "tied",
         "hidden", "layers", "vocab", "seq", "micro_batch", "micro_batches", "tokens_per_step", "recompute")


def truth(name: str) -> dict:
    return json.loads((CORPUS_RUNS / name / "truth.json").read_text())["fields"]


def convention_flops_per_token(t: dict) -> int:
    """docs/model.md's headline convention (torchtitan's): 6 · (active − input embedding) + 6 · L ·
    heads · (head_dim + v_head_dim) · seq, from the truth's own counts."""
    v = t.get("v_head_dim") or t["head_dim"]
    return 6 * (t["params_active"] - t["params_embedding"]) + 6 * t["layers"] * t["heads"] * (t["head_dim"] + v) * t["seq"]


_FIELDS: dict[str, dict] = {}


def inferred(name: str) -> dict:
    if name not in _FIELDS:
        model = analyze_run(CORPUS_RUNS / name).model_json()
        _FIELDS[name] = {k: x["value"] for k, x in model["fields"].items()}
    return _FIELDS[name]


@pytest.mark.committed
def test_the_trainer_runs_cover_todays_families():
    """A routed-only MoE, latent attention with a shared expert and a dense layer, a many-expert
    top-8 MoE, a dense model whose heads × head_dim is not the hidden size, with a tied table, and an
    MoE run with accumulated micro-batches and recomputation."""
    got = {n: truth(n) for n in TRUTH_RUNS}
    assert len(got) >= 4, sorted(got)
    assert any(t.get("experts") and t["shared_experts"] == 0 and t["attention"] == "GQA" for t in got.values())
    assert any(t.get("attention") == "MLA" and t["shared_experts"] >= 1 and t["dense_layers"] >= 1 for t in got.values())
    assert any((t.get("top_k") or 0) >= 8 for t in got.values())
    assert any(not t.get("experts") and t["tied"] and t["heads"] * t["head_dim"] != t["hidden"] for t in got.values())
    assert any(t["micro_batches"] > 1 and t["recompute"] == "full" and t.get("experts") for t in got.values())


@pytest.mark.committed
@pytest.mark.parametrize("name", TRUTH_RUNS)
def test_the_model_block_is_the_model_directorys(name):
    t, f = truth(name), inferred(name)
    for k in EXACT:
        if k in t:
            assert f.get(k) == t[k], (k, f.get(k), t[k])
    assert ("experts" in f) == ("experts" in t)  # a dense model has no experts field, never a guessed 0
    assert f["params_total"] == pytest.approx(t["params_total"], rel=0.01)
    assert f["params_active"] == pytest.approx(t["params_active"], rel=0.10)
    assert f["model_flops_per_token"] == pytest.approx(convention_flops_per_token(t), rel=0.05)


@pytest.mark.committed
@pytest.mark.parametrize("name", TRUTH_RUNS)
def test_the_truth_is_the_model_directorys_and_the_rows(name):
    """truth.json is the model the row's ``--model_name`` names, with the row's batch; its own
    FLOPs per token are the convention's (the test above holds the inference to both)."""
    e = TABLE.BY_NAME[name]
    doc = json.loads((CORPUS_RUNS / name / "truth.json").read_text())
    family, size = doc["family"], doc["size"]
    assert e.args[e.args.index("--model_name") + 1].endswith(f"/{family}-{size}")
    t = doc["fields"]
    assert t["micro_batch"] == int(e.args[e.args.index("--per_device_train_batch_size") + 1])
    assert t["model_flops_per_token"] == convention_flops_per_token(t)
    cfg = doc["config"]
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]) == (t["hidden"], t["layers"], t["vocab"])
    assert cfg.get("tie_word_embeddings", False) == t["tied"]


@pytest.mark.unit
def test_every_trainer_row_on_a_family_has_a_gpu_twin():
    cpu = {e.name.removesuffix("_cpu") for e in TABLE.ENTRIES if e.kind == "cpu" and TABLE.model_dir(e)}
    gpu = {e.name.removesuffix("_gpu") for e in TABLE.ENTRIES if e.kind == "gpu" and TABLE.model_dir(e)}
    families = {n for n in cpu if n != "hf_trainer_ddp"}
    assert len(families) >= 4 and families <= gpu
    for n in families:
        e = TABLE.BY_NAME[f"{n}_gpu"]
        assert e.gpus == 1 and "--bf16" in e.args and TABLE.model_dir(e).name.endswith("-small")
