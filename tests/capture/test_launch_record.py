"""The launch record (workbench.capture.launch) on live models in this process: a dense model, a tied
one, torchtitan's checkpointing (full and op-level selective), a checkpoint called inside forward, and
Hugging Face's Qwen3 and Qwen3-MoE built from configs (when transformers is installed); and the model
analysis reads from it (workbench.analysis.model.launch) with no trace at all."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from tests.conftest import SCRIPTS
from workbench.analysis.model.launch import fields, overlay
from workbench.capture.launch import LaunchRecorder
from workbench.format import contract

pytestmark = pytest.mark.unit
sys.path.insert(0, str(SCRIPTS))
import lm_train  # noqa: E402


def record(tmp_path, model, inputs, kwargs=None, steps=1, loss=None) -> dict:
    """Train ``model`` ``steps`` steps under a started recorder; its launch record."""
    rec = LaunchRecorder(tmp_path, 0).start()
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for _ in range(steps):
            out = model(*inputs, **(kwargs or {}))
            (loss or (lambda o: o.float().pow(2).mean()))(out).backward()
            opt.step()
            rec.first_step(opt)  # the session's optimizer-step hook calls it
            opt.zero_grad()
    finally:
        rec.stop()
    return json.loads((tmp_path / contract.launch_name(0)).read_text())


def test_a_dense_model_is_recorded_before_and_after_its_first_forward(tmp_path):
    model = lm_train.build()
    doc = record(tmp_path, model, (torch.randint(0, 2048, (2, 64)),))
    m = doc["model"]
    assert doc["written"] == ["first_forward", "first_forward_end", "first_step"]
    assert m["params_numel"] == sum(p.numel() for p in model.parameters()) and not m["tied"]
    assert m["blocks"] == {"path": "layers", "count": 3, "class": "Block", "classes": ["Block"],
                           "params_numel": sum(p.numel() for p in model.layers.parameters())}
    assert doc["inputs"]["args"] == [{"shape": [2, 64], "dtype": "int64", "device": "cpu"}]
    assert doc["outputs"] == {"shape": [2, 64, 2048], "dtype": "float32", "device": "cpu"}
    assert doc["recompute"]["mode"] == "none" and doc["recompute"]["dynamic"]["modules_seen"] > 0
    assert doc["optimizer"]["class"] == "torch.optim.adamw.AdamW"
    assert doc["optimizer"]["state_bytes"] == 2 * m["params_bytes"] + 4 * len(list(model.parameters()))  # two moments + steps
    assert doc["forwards_before_first_step"] == 1
    assert all(v < 500 for v in doc["cost_ms"].values()), doc["cost_ms"]  # milliseconds, not seconds
    kind, f = fields(doc)
    assert kind == "transformer"
    assert {k: f[k]["value"] for k in ("params_total", "vocab", "hidden", "layers", "tied", "seq", "micro_batch",
                                       "micro_batches", "tokens_per_step", "recompute", "optimizer")} == {
        "params_total": m["params_numel"], "vocab": 2048, "hidden": 128, "layers": 3, "tied": False, "seq": 64,
        "micro_batch": 2, "micro_batches": 1, "tokens_per_step": 128, "recompute": "none", "optimizer": "adamw"}
    assert f["ffn"]["value"] == 384 and f["gated"]["value"] is True
    assert f["heads"]["value"] == 4 and f["kv_heads"]["value"] == 2  # the attention module's own attributes


def test_a_tied_table_is_one_tensor_counted_once(tmp_path):
    model = lm_train.build(tied=True)
    doc = record(tmp_path, model, (torch.randint(0, 2048, (1, 32)),))
    m = doc["model"]
    unique = sum(p.numel() for p in model.parameters())  # parameters() yields a tied tensor once
    assert m["params_numel"] == unique and m["params_numel_with_tied"] == unique + 2048 * 128
    assert m["tied"] == [["tok_embeddings.weight", "output.weight"]]
    _, f = fields(doc)
    assert f["tied"]["value"] is True and f["params_total"]["value"] == unique
    assert f["params_embedding"]["value"] == 0  # the tied table counts as the head, as the convention has it


@pytest.mark.parametrize("ac, mode", [("full", "full"), ("op", "selective-op")])
def test_torchtitans_checkpointing_is_read_with_what_its_policy_saves(tmp_path, ac, mode):
    model = lm_train.build(ac)
    doc = record(tmp_path, model, (torch.randint(0, 2048, (1, 32)),), loss=lambda o: lm_train.loss_fn(o, torch.zeros(1, 32, dtype=torch.long)))
    rc = doc["recompute"]
    assert rc["mode"] == mode and rc["static"]["checkpoint_wrappers"] == 3
    assert rc["dynamic"]["blocks_under_checkpoint"] == 3
    assert rc["dynamic"]["how"] == (["selective"] if ac == "op" else ["non-reentrant"])
    if ac == "op":
        sel = rc["static"]["selective"]
        assert sel["mm"] == "saves 2 of 4"  # every other matmul, as torchtitan's policy counts them
        assert "aten._scaled_dot_product_flash_attention.default" in sel["saves"]
        assert "aten.silu.default" in sel["recomputes"] and "aten.mul.Tensor" in sel["recomputes"]
        assert "selective_checkpointing_context_fn" in rc["static"]["context_fn"]
    assert fields(doc)[1]["recompute"]["value"] == ("full" if ac == "full" else "selective")
    # the planner's word for the mode (plan --from-run plans it): torchtitan's op-level policy is "op"
    assert fields(doc)[1].get("recompute_mode", {}).get("value") == (None if ac == "full" else "op")


def test_a_checkpoint_called_inside_forward_is_seen_in_the_first_forward(tmp_path):
    from torch.utils.checkpoint import checkpoint

    class Manual(lm_train.LM):
        def forward(self, tokens):
            h = self.tok_embeddings(tokens)
            for i, layer in enumerate(self.layers.values()):
                h = checkpoint(layer, h, use_reentrant=False) if i % 2 == 0 else layer(h)
            return self.output(self.norm(h))

    torch.manual_seed(0)
    doc = record(tmp_path, Manual(layers=4), (torch.randint(0, 2048, (1, 16)),))
    rc = doc["recompute"]
    assert rc["static"]["checkpoint_wrappers"] == 0  # no wrapper shows it
    assert (rc["mode"], rc["blocks"], rc["of"], rc["every"]) == ("selective-layer", 2, 4, 2)
    assert rc["dynamic"]["block_ids"] == ["0", "2"]
    assert fields(doc)[1]["recompute_mode"]["value"] == "layer:2"


def test_a_run_with_no_trace_still_has_its_model():
    """The model block of a run whose only evidence is its launch record (a job that failed in its
    first forward): overlay onto an empty block."""
    doc = {"model": {"params_numel": 1000, "params": [["emb.weight", [10, 8], "float32", "cpu", "Embedding", True, None],
                                                      ["head.weight", [10, 8], "float32", "cpu", "Linear", True, None]],
                     "blocks": {"path": "layers", "count": 2, "class": "Block"}, "tied": [],
                     "config": {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4}},
           "inputs": {"args": [], "kwargs": {"input_ids": {"shape": [3, 16], "dtype": "int64", "device": "cuda:0"}}},
           "recompute": {"mode": "none", "basis": "x"}, "autocast": {"cuda": "bfloat16"}, "optimizer": {"class": "torch.optim.adamw.AdamW"}}
    block = overlay({"kind": None, "convention": "x", "fields": {}}, {0: doc})
    f = {k: v["value"] for k, v in block["fields"].items()}
    assert block["kind"] == "transformer" and block["launch_record"] is True
    assert (f["params_total"], f["layers"], f["heads"], f["kv_heads"], f["attention"], f["vocab"], f["tied"]) == (
        1000, 2, 2, 1, "MQA", 10, False)
    assert (f["micro_batch"], f["seq"], f["dtype"], f["recompute"], f["optimizer"]) == (3, 16, "bf16", "none", "adamw")
    assert "micro_batches" not in f  # no optimizer step was seen: the accumulation is unknown, not guessed
    derived = {"params_active", "params_non_embedding", "model_flops_per_token"}  # computed from the record's fields
    assert all(v["source"].startswith("the launch record") for k, v in block["fields"].items() if k not in derived)


def test_hugging_face_models_from_configs(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Qwen3Config(vocab_size=1024, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    model.config.use_cache = False
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    ids = torch.randint(0, 1024, (2, 24))
    doc = record(tmp_path, model, (), {"input_ids": ids, "labels": ids}, loss=lambda o: o.loss)
    assert doc["model"]["config"]["num_attention_heads"] == 4 and doc["model"]["tied"]
    assert doc["recompute"]["mode"] == "full" and doc["recompute"]["static"]["hf_gradient_checkpointing"]["on"] == 2
    _, f = fields(doc)
    assert {k: f[k]["value"] for k in ("params_total", "layers", "heads", "kv_heads", "head_dim", "vocab", "hidden", "ffn",
                                       "tied", "seq", "micro_batch", "qk_norm")} == {
        "params_total": sum(p.numel() for p in model.parameters()), "layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 32,
        "vocab": 1024, "hidden": 64, "ffn": 176, "tied": True, "seq": 24, "micro_batch": 2, "qk_norm": True}
    assert "loss" in doc["outputs"]  # the model computed its own loss (labels were passed)


def test_a_hugging_face_mixture_of_experts(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Qwen3MoeConfig(vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    ids = torch.randint(0, 512, (1, 16))
    doc = record(tmp_path, model, (), {"input_ids": ids, "labels": ids}, loss=lambda o: o.loss)
    _, f = fields(doc)
    assert (f["experts"]["value"], f["top_k"]["value"], f["moe_ffn"]["value"], f["moe_layers"]["value"]) == (8, 2, 32, 2)
    routed = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    assert f["routed"]["value"] == routed
    block = overlay({"kind": None, "fields": {}}, {0: doc})
    assert block["fields"]["params_active"]["value"] == f["params_total"]["value"] - routed + routed * 2 // 8
    assert f["dtype"]["value"] == "bf16"


@pytest.mark.parametrize("mode, expect", [("full", "full"), ("selective", "partial")])
def test_the_bundled_engines_recomputation(tmp_path, mode, expect):
    """The engine checkpoints whole blocks (full) or only each attention core, a function inside the
    attention module's forward (selective): seen by the checkpoint calls themselves."""
    from workbench.engine.config import ModelConfig
    from workbench.engine.model import GPT
    from workbench.engine.parallel.compose import apply_ac

    torch.manual_seed(0)
    model = GPT(ModelConfig(preset="tiny"))
    apply_ac(model, mode)
    doc = record(tmp_path, model, (torch.randint(0, model.cfg.vocab, (2, model.cfg.seq_len)),))
    rc = doc["recompute"]
    assert rc["mode"] == expect
    calls = rc["dynamic"]["checkpoint_calls"]
    assert sum(calls.values()) == model.cfg.n_layer
    assert list(calls) == (["Block"] if mode == "full" else ["_core"])
    assert fields(doc)[1]["recompute"]["value"] == ("full" if mode == "full" else "selective")
    assert fields(doc)[1].get("recompute_mode", {}).get("value") == (None if mode == "full" else "selective")
