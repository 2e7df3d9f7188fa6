"""The engine's ~1.3B GPT on one H200 with recomputation none / selective / full
(traces/recompute_1p3b_*, benchmarks/recompute_gpu.py): the model inferred from each trace against
the config that ran, and MFU as the engine counts it (6N + 12·L·h·s per token, N without the
position table, ``GPT.flops_per_token``) from its own log's step times over the same steps."""

from __future__ import annotations

import json
import re
from statistics import mean

import pandas as pd
import pytest

from tests.conftest import TRACES
from workbench.pipeline.verdict import analyze_run

pytestmark = pytest.mark.committed

RUNS = {"recompute_1p3b_b16_none": "none", "recompute_1p3b_b16_selective": "selective",
        "recompute_1p3b_b16_full": "full", "recompute_1p3b_b48_full": "full",
        "recompute_1p3b_b48_mb24x2_none": "none", "recompute_1p3b_b48_mb12x4_none": "none"}
OWN_STEP = re.compile(r"^step (\d+) loss \S+ grad_norm \S+ step_ms ([\d.]+)$", re.M)
H200_BF16 = 989e12


def engine_flops_per_token(cfg: dict) -> float:
    """workbench.engine.model.GPT.flops_per_token for a tied GPT (no torch needed)."""
    L, h, s, V = cfg["n_layer"], cfg["d_model"], cfg["seq_len"], cfg["vocab"]
    block = 4 * (h * h + h) + (h * 4 * h + 4 * h) + (4 * h * h + h) + 4 * h  # q k v proj, fc, proj, 2 norms
    n = V * h + L * block + 2 * h  # the tied table once, the final norm; no position table
    return 6 * n + 12 * L * h * s


@pytest.mark.parametrize("run, recompute", RUNS.items())
def test_the_model_and_mfu_are_the_engines(run, recompute):
    d = TRACES / run
    man = json.loads((d / "manifest.json").read_text())
    cfg, train = man["config"]["model"], man["config"]["train"]
    doc = analyze_run(d).to_json()
    f = {k: v["value"] for k, v in doc["model"]["fields"].items()}
    assert (f["layers"], f["hidden"], f["heads"], f["vocab"], f["seq"]) == (
        cfg["n_layer"], cfg["d_model"], cfg["n_head"], cfg["vocab"], cfg["seq_len"])
    assert f["recompute"] == recompute == train["recompute"]
    assert f["micro_batches"] == train["grad_accum"] and f["micro_batch"] == man["config"]["data"]["batch_size"]
    assert f["model_flops_per_token"] == engine_flops_per_token(cfg)
    # the engine's own step times (its log) over the steps the job's step covers, unprofiled ones
    own = {int(k): float(v) for k, v in OWN_STEP.findall((d / "console.log").read_text())}
    (job,) = doc["summary"]["job"]
    rows = pd.read_csv(d / "steps_rank0.csv")
    steps = rows[(rows["profiler"] == "off") & rows["step"].between(job["first_step"], job["last_step"])]["step"]
    own_step_s = mean(own[s] for s in steps) / 1e3
    tokens = man["config"]["data"]["batch_size"] * cfg["seq_len"] * train["grad_accum"]
    own_mfu = 100 * engine_flops_per_token(cfg) * tokens / own_step_s / H200_BF16
    assert doc["efficiency"]["mfu_pct"] == pytest.approx(own_mfu, rel=0.10), (doc["efficiency"]["mfu_pct"], own_mfu)
    # full recomputation re-runs the blocks' forward: the executed FLOPs (HFU) sit above MFU
    if recompute == "full":
        assert doc["efficiency"]["hfu_pct"] > 1.10 * doc["efficiency"]["mfu_pct"]
