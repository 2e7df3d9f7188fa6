"""Every derived figure is held to its physical bound where the result is assembled
(workbench.pipeline.bounds): past it the figure is withheld, the model's confidence drops, the
finding that rests on it is withheld, and one warning says which evidence disagreed. A committed
run within its bounds comes out as it went in."""

from __future__ import annotations

import copy

import pytest

from tests.golden import golden
from workbench.pipeline import bounds

GPU = "corpus/torchtitan_8b_full_gpu"  # model MFU, HFU, kernel classes against an H200's peaks


@pytest.fixture(scope="module")
def gold():
    return golden.load_golden()


@pytest.mark.committed
def test_every_committed_run_is_within_its_bounds(gold):
    for name, entry in gold.items():
        if entry.get("doc"):
            assert bounds.apply(entry["doc"]) == entry["doc"], name


def _doc(gold):
    return copy.deepcopy(gold[GPU]["doc"])


@pytest.mark.committed
def test_an_mfu_past_the_peak_is_withheld_and_said(gold):
    doc = _doc(gold)
    doc["efficiency"]["mfu_pct"] = 43403.0
    doc["metrics"]["mfu_pct"] = 43403.0
    out = bounds.apply(doc)
    assert out["efficiency"]["mfu_pct"] is None and out["metrics"]["mfu_pct"] is None
    assert [i["figure"] for i in out["implausible"]] == ["efficiency.mfu_pct"]
    said = [w for w in out["run"]["warnings"] if w.startswith("implausible:")]
    assert len(said) == 1 and "MFU 43,403.0 % is past 100 %" in said[0]
    conf = {f: v["confidence"] for f, v in out["model"]["fields"].items()}
    was = {f: v["confidence"] for f, v in doc["model"]["fields"].items()}
    assert all(conf[f] == bounds.LOWER[c] for f, c in was.items()) and "high" not in conf.values()


@pytest.mark.committed
def test_flops_past_what_the_step_allows_withhold_every_flop_figure(gold):
    doc = _doc(gold)
    e = doc["efficiency"]
    e["flops_per_step"] *= 1e9
    e["achieved_tflops"] *= 1e9
    e["hfu_pct"] = e["hfu_bf16_pct"] = 1e17
    out = bounds.apply(doc)["efficiency"]
    assert out["achieved_tflops"] is None and out["hfu_pct"] is None and out["hfu_bf16_pct"] is None
    assert out["mfu_note"] is None
    assert all(c["pct_of_peak"] is None for c in out["classes"] if c["bound"] == "compute")
    assert out["mfu_pct"] == e["mfu_pct"]  # the model's FLOPs over the step still hold


@pytest.mark.committed
def test_a_copy_past_hbm_bandwidth_is_withheld(gold):
    doc = _doc(gold)
    c = next(c for c in doc["efficiency"]["classes"] if c["bound"] == "memory")
    c["pct_of_peak"], c["gb_per_s"] = 163.0, 7824.0
    out = bounds.apply(doc)
    got = next(x for x in out["efficiency"]["classes"] if x["subclass"] == c["subclass"])
    assert got["pct_of_peak"] is None
    assert any("163.0 % of the device's HBM bandwidth" in w for w in out["run"]["warnings"])


@pytest.mark.committed
def test_zero_size_model_fields_are_withheld_at_low_confidence(gold):
    doc = _doc(gold)
    for f in ("hidden", "vocab", "global_tokens_per_step"):
        doc["model"]["fields"][f]["value"] = 0
    out = bounds.apply(doc)
    fields = out["model"]["fields"]
    assert all(fields[f] == {**fields[f], "value": None, "confidence": "low"} for f in ("hidden", "vocab"))
    assert any("hidden, vocab, global_tokens_per_step are 0" in w for w in out["run"]["warnings"])


@pytest.mark.unit
def test_a_finding_resting_on_an_impossible_figure_is_withheld():
    from workbench.diagnose.base import Diagnosis

    ok = Diagnosis(id="low_mfu", title="t", severity="warning", evidence={"mfu_pct": 30.0}, recommendation="r", estimated_gain={})
    bad = Diagnosis(id="low_mfu", title="t", severity="warning", evidence={"mfu_pct": 2.3e10}, recommendation="r", estimated_gain={})
    kept, withheld = bounds.plausible_findings([ok, bad])
    assert kept == [ok] and withheld[0]["figure"] == "diagnoses.low_mfu"
