"""torchtitan's own gpt-oss model (attention sinks, sliding-window layers, 64 heads × 64 on hidden 256,
8 KV heads, routed experts as grouped GEMMs) trained on the CPU (``traces/titan_gpt_oss_cpu``, made by
``benchmarks/titan_gpt_oss_cpu.py``, whose ``truth:`` line is torchtitan's own count). On the CPU its
compiled attention still calls ``aten::bmm``; on the GPU FlexAttention is one kernel: the second test
takes the attention's ops out of the counted ops and reads the heads off the rotary embedding."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import TRACES
from workbench.analysis.flops import op_flops
from workbench.analysis.model.context import FWD_ATTENTION
from workbench.analysis.model.rank import rank_model
from workbench.analysis.steps import step_windows
from workbench.load.trace import read_trace
from workbench.pipeline.verdict import analyze_run

pytestmark = [pytest.mark.committed, pytest.mark.slow]

RUN = TRACES / "titan_gpt_oss_cpu"
SHAPE = ("heads", "head_dim", "kv_heads", "layers", "hidden", "experts", "top_k", "moe_ffn", "vocab", "seq", "micro_batch")


def truth() -> dict:
    return json.loads(re.search(r"^truth: (\{.*\})$", (RUN / "console.log").read_text(), re.M).group(1))


def test_the_model_and_its_flops_are_torchtitans():
    """64 × 64 heads (8 KV) on hidden 256, 4 blocks of 8 experts (top-4): 104.15 M FLOPs a token in
    torchtitan's convention against its own 104.08 M (+0.07 %)."""
    t, d = truth(), analyze_run(RUN).to_json()
    f = {k: v["value"] for k, v in d["model"]["fields"].items()}
    assert {k: f.get(k) for k in SHAPE} == {k: t[k] for k in SHAPE}
    assert f["params_total"] == t["torchtitan_params"]
    got = d["efficiency"]["mfu_by_convention"]["torchtitan"]["model_flops_per_token"]
    assert got == pytest.approx(t["torchtitan_flops_per_token"], rel=0.01)


def test_an_attention_compiled_into_one_kernel_still_gives_its_heads():
    """The attention's ops taken out (what FlexAttention on the GPU leaves): rotate_half's
    [2, 128, 64, 32] gives 64 heads of 64, the key's 8 heads, and the 4 blocks."""
    t = read_trace(RUN / "rank0.pt.trace.json.gz")
    w = step_windows(t)
    ops = op_flops(t, w)
    f = rank_model(t, w, ops[~ops["name"].isin([*FWD_ATTENTION, "aten::bmm"])])["fields"]
    assert "rotate_half" in f["heads"]["source"]
    want = truth()
    assert {k: f[k]["value"] for k in ("heads", "head_dim", "kv_heads", "layers")} == {
        k: want[k] for k in ("heads", "head_dim", "kv_heads", "layers")}
