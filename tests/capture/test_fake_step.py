"""The fake-tensor step (workbench.capture.fake_step) against the same step run for real on this CPU:
a dense model, a tied one, torchtitan's full and op-level checkpointing, the bundled engine's
attention-core checkpointing, and Hugging Face's Qwen3 (tied, gradient checkpointing) and Qwen3-MoE
(bf16 grouped GEMMs) built from configs. The real peak is the CPU allocator's, from torch.profiler's
memory events over the step, plus what was alive before it (parameters, optimizer state, inputs)."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from tests.conftest import SCRIPTS
from workbench.capture import fake_layouts, fake_step, launch_model

pytestmark = [pytest.mark.unit, pytest.mark.slow]
sys.path.insert(0, str(SCRIPTS))
import lm_train  # noqa: E402

TOLERANCE = 0.03
"""The fake step's peak within 3 % of the real one (the NOTES measured 2.5 % on this CPU)."""


def _bytes(tensors) -> int:
    seen, n = set(), 0
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen:
            seen.add(t.untyped_storage().data_ptr())
            n += t.untyped_storage().nbytes()
    return n


def real_peak(tmp_path, model, opt, args, kwargs, loss) -> int:
    """One step run for real after a first one made the optimizer's state, as the fake step does."""
    from torch.profiler import ProfilerActivity, profile

    def step():
        loss(model(*args, **kwargs)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    alive = _bytes([*model.parameters(), *model.buffers(), *args, *kwargs.values(),
                    *(v for s in opt.state.values() for v in s.values())])
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    return alive + max(e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]")


def check(tmp_path, model, args, kwargs, loss, vocab=None, autocast=None) -> dict:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=False)
    blocks = launch_model.blocks(model)
    inputs = (fake_layouts.spec_of(list(args)), fake_layouts.spec_of(dict(kwargs)))
    fake = fake_step.measure(model, opt, inputs, vocab=vocab, blocks_path=(blocks or {}).get("path"), autocast=autocast)
    real = real_peak(tmp_path, model, opt, args, kwargs, loss)
    assert abs(fake["peak_bytes"] / real - 1) < TOLERANCE, (fake["peak_bytes"], real, fake["by_category"])
    # every parameter is a weight of the fake step, each storage once
    assert fake["by_category"]["weights"] == launch_model.parameters(model)["params_bytes"]
    assert fake["tally"]["flops_total"] > 0 and fake["tally"]["memory"]["optimizer"]["bytes"] > 0
    return fake


TOKENS = (torch.randint(0, 2048, (2, 128)),)


def _lm_loss(out):
    return lm_train.loss_fn(out, torch.zeros(out.shape[:2], dtype=torch.long))


@pytest.mark.parametrize("ac, tied", [("none", False), ("none", True), ("full", False), ("op", False)],
                         ids=["dense", "tied", "full_checkpoint", "op_selective"])
def test_a_torchtitan_shaped_model(tmp_path, ac, tied):
    fake = check(tmp_path, lm_train.build(ac, tied), TOKENS, {}, _lm_loss, vocab=2048)
    assert fake["loss"].startswith("cross-entropy over the 2,048-token vocabulary")


def test_the_layouts_of_one_model_rank_as_recomputation_says(tmp_path):
    """On one copy of the job's model, none > op-level selective > full, and half the micro-batch
    holds less; recomputation adds FLOPs, a smaller micro-batch takes fewer."""
    model = lm_train.build("op")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=False)
    inputs = (fake_layouts.spec_of([torch.zeros(4, 128, dtype=torch.long)]), {})
    got = {rc: fake_step.measure(model, opt, inputs, recompute=rc, vocab=2048, blocks_path="layers")
           for rc in ("none", "selective-op", "full")}
    half = fake_step.measure(model, opt, inputs, part=2, vocab=2048, blocks_path="layers")
    peak = {k: v["peak_bytes"] for k, v in got.items()}
    assert peak["none"] > peak["selective-op"] > peak["full"]
    flops = {k: v["tally"]["flops_total"] for k, v in got.items()}
    assert flops["none"] < flops["selective-op"] < flops["full"]
    assert half["micro_batch"] == 2 and half["peak_bytes"] < got["selective-op"]["peak_bytes"]
    assert list(model.layers.values())[0].__class__.__name__ == "CheckpointWrapper"  # the live model is untouched


def test_the_bundled_engine(tmp_path):
    from workbench.engine.config import ModelConfig
    from workbench.engine.model import GPT, loss_fn
    from workbench.engine.parallel.compose import apply_ac

    torch.manual_seed(0)
    model = GPT(ModelConfig(preset="tiny"))
    apply_ac(model, "selective")
    x = torch.randint(0, model.cfg.vocab, (4, model.cfg.seq_len))
    check(tmp_path, model, (x,), {}, lambda out: loss_fn(out, x), vocab=model.cfg.vocab)


def test_hugging_face_qwen3_tied_with_gradient_checkpointing(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Qwen3Config(vocab_size=2048, hidden_size=128, intermediate_size=352, num_hidden_layers=3,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True,
                                   use_cache=False)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    ids = torch.randint(0, 2048, (2, 128))
    fake = check(tmp_path, model, (), {"input_ids": ids, "labels": ids}, lambda out: out.loss, vocab=2048)
    assert fake["loss"] == "the model's own loss"


def test_hugging_face_qwen3_moe_in_bf16(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Qwen3MoeConfig(vocab_size=1024, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                      num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1, use_cache=False)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.train()
    ids = torch.randint(0, 1024, (2, 64))
    fake = check(tmp_path, model, (), {"input_ids": ids, "labels": ids}, lambda out: out.loss, vocab=1024)
    assert fake["tally"]["gemm"]["forward"]["flops"] > 0  # the grouped GEMMs counted (FlopCounterMode counts 0)
