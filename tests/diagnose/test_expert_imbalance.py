"""expert_imbalance on the engine's MoE twins (traces/engine_moe_*, made by traces/make_cpu_samples.sh)
and on a transformers MoE run (traces/hf_qwen3_moe_cpu): numbers derived by hand from the configs.

The twins: 2 ranks x batch 8 x seq 64 = 1024 tokens per step, top-2 = 2048 token copies per MoE
layer, 8 experts: a mean of 256 per expert. ``faults.skewed_routing = 1.0`` makes every token pick
expert 0: 1024 copies, 4x the mean, MaxVio 3.0 in both layers on every recorded step.
"""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import TRACES
from workbench.pipeline.verdict import analyze_run

pytestmark = pytest.mark.committed


def _finding(run):
    a = analyze_run(TRACES / run if isinstance(run, str) else run, cache=False)
    return a, next((d for d in a.diagnoses if d.id == "expert_imbalance"), None)


def test_fires_on_the_planted_skew_with_its_numbers():
    a, d = _finding("engine_moe_skewed")
    assert d is not None and d.severity == "critical"
    ev = d.evidence
    assert ev["maxvio"] == pytest.approx(3.0) and ev["max_over_mean"] == pytest.approx(4.0)
    assert ev["uneven_layers"] == ["blocks.0.moe", "blocks.1.moe"] and ev["steps"] == 3 and ev["ranks"] == [0, 1]
    for layer in ev["per_layer"].values():
        assert layer["tokens_per_step"] == 2048 and layer["mean_tokens_per_expert"] == 256
        assert layer["hottest_experts"][0] == 0
    assert d.estimated_gain["expert_work_saved_pct"] == pytest.approx(75.0)
    doc = a.to_json()
    assert doc["metrics"]["expert_maxvio"] == pytest.approx(3.0)
    assert [l["maxvio"] for l in doc["expert_load"]["layers"]] == [3.0, 3.0]


def test_silent_on_the_balanced_twin_that_records_its_load():
    a, d = _finding("engine_moe_balanced")
    assert d is None
    load = a.to_json()["expert_load"]
    assert [l["tokens_per_step"] for l in load["layers"]] == [2048, 2048]  # recorded: the silence is a measurement
    assert load["maxvio"] < 0.5 and not any("expert load" in w for w in a.run.warnings)


def test_a_bare_trace_of_an_moe_run_says_its_load_was_not_recorded(tmp_path):
    bare = tmp_path / "moe_bare"
    bare.mkdir()
    for f in (TRACES / "engine_moe_skewed").glob("rank*.pt.trace.json.gz"):
        shutil.copy(f, bare / f.name)
    a, d = _finding(bare)
    assert d is None and "expert_load" not in a.to_json()
    assert any(w.startswith("expert load not recorded") and "aten::_grouped_mm" in w for w in a.run.warnings), a.run.warnings


def test_a_dense_run_says_nothing_of_experts():
    a, d = _finding("engine_ddp")
    doc = a.to_json()
    assert d is None and "expert_load" not in doc and "expert_maxvio" not in doc["metrics"]
    assert not any("expert" in w for w in a.run.warnings)


def test_a_transformers_router_recorded_unmodified():
    # Qwen3-MoE, 2 layers, 8 experts, top-2, batch 4 x seq 64 on one rank: 512 token copies per layer per step
    a, d = _finding("hf_qwen3_moe_cpu")
    load = a.to_json()["expert_load"]
    assert [l["layer"] for l in load["layers"]] == ["model.layers.0.mlp.gate", "model.layers.1.mlp.gate"]
    assert all(l["tokens_per_step"] == 512 and l["experts"] == 8 and l["steps"] == 3 for l in load["layers"])
    # layer 1 is uneven beyond chance (sqrt(2 ln 8 / 64) = 0.26): info
    assert d is not None and d.severity == "info" and d.evidence["worst_layer"] == "model.layers.1.mlp.gate"


def test_expert_parallel_ranks_exchange_tokens_by_all_to_all():
    # per step and rank, each of the 2 MoE layers: forward = counts + dispatch + combine (3), backward =
    # the two row exchanges reversed (2): 10 all_to_all_single calls; 3 steps recorded
    from workbench.load import load_run

    run = load_run(TRACES / "engine_moe_skewed")
    for r, t in run.traces.items():
        assert int((t.events["name"] == "c10d::alltoall_base_").sum()) == 30, r
