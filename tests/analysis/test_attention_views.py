"""Heads and head width where the attention runs as no op the analysis knows (torchtitan's gpt-oss:
FlexAttention under torch.compile, one compiled kernel): the rotary embedding's ``rotate_half`` over
``[batch, seq, heads, head_dim / 2]`` around it gives the query's heads and width (its Q projection's
width from hidden) and the key's heads. Checked on committed traces with their attention ops taken out
of the counted ops (what a compiled attention leaves), against what the same traces give with them."""

from __future__ import annotations

import pytest

from tests.conftest import TRACES
from workbench.analysis.flops import op_flops
from workbench.analysis.model.context import FWD_ATTENTION
from workbench.analysis.model.rank import rank_model
from workbench.analysis.steps import step_windows
from workbench.load.trace import read_trace

pytestmark = pytest.mark.committed

FIELDS = ("heads", "head_dim", "kv_heads", "layers", "moe_layers", "experts", "top_k")


@pytest.mark.parametrize("run", ["moe_qwen3_cpu", "dense_qwen3_cpu", "corpus/torchtitan_qwen3_moe_gpu"])
def test_a_compiled_attention_still_gives_heads_head_dim_kv_heads_and_layers(run):
    """Hugging Face's Qwen3-MoE and dense Qwen3 (rotate_half over [b, heads, s, d/2]) and torchtitan's
    Qwen3-MoE on the GPU ([b, s, heads, d/2]): 8 × 64 (2 KV), 8 × 64 (2 KV), 32 × 128 (4 KV)."""
    t = read_trace(TRACES / run / "rank0.pt.trace.json.gz")
    w = step_windows(t)
    ops = op_flops(t, w)
    seen = rank_model(t, w, ops)["fields"]
    hidden = rank_model(t, w, ops[~ops["name"].isin(FWD_ATTENTION)])["fields"]
    assert "heads" in seen and "per head" in hidden["heads"]["source"]
    assert {k: hidden[k]["value"] for k in FIELDS if k in seen} == {k: seen[k]["value"] for k in FIELDS if k in seen}
