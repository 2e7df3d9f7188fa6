"""The golden comparison fails on a change: a number, a missing diagnosis, a verdict, a refusal."""

from __future__ import annotations

import copy

import pytest

from tests.golden import golden

pytestmark = pytest.mark.unit

GOLD = golden.load_golden()


def entry(run: str = "ddp_slow_data") -> dict:
    return copy.deepcopy(GOLD[run])


def diffs(old: dict, new: dict) -> list:
    return list(golden.differences(old, new))


def test_the_same_entry_passes_and_rounding_noise_is_tolerated():
    old, new = entry(), entry()
    assert diffs(old, new) == []
    new["doc"]["metrics"]["step_ms"] *= 1 + 1e-9
    assert diffs(old, new) == []


def test_a_changed_number_fails_with_its_key_path():
    old, new = entry(), entry()
    new["doc"]["metrics"]["step_ms"] = old["doc"]["metrics"]["step_ms"] * 1.001
    assert [d[0] for d in diffs(old, new)] == ["$.doc.metrics.step_ms"]
    new = entry()
    new["doc"]["diagnoses"][0]["evidence"]["share_pct"] += 0.01
    assert [d[0] for d in diffs(old, new)] == ["$.doc.diagnoses[id=dataloader_stall].evidence.share_pct"]
    new = entry()
    new["doc"]["summary"]["steps"] += 1  # an int
    assert [d[0] for d in diffs(old, new)] == ["$.doc.summary.steps"]


def test_a_missing_or_new_diagnosis_fails():
    old, new = entry("gpu_memory_heavy"), entry("gpu_memory_heavy")
    gone = new["doc"]["diagnoses"].pop(2)
    assert [(d[0], d[2]) for d in diffs(old, new)] == [(f"$.doc.diagnoses[id={gone['id']}]", "<missing>")]
    assert [(d[0], d[1]) for d in diffs(new, old)] == [(f"$.doc.diagnoses[id={gone['id']}]", "<missing>")]
    new = entry("gpu_memory_heavy")
    new["doc"]["diagnoses"].reverse()
    assert [d[0] for d in diffs(old, new)] == ["$.doc.diagnoses(order of ids)"]


def test_a_changed_verdict_severity_or_text_fails():
    old, new = entry(), entry()
    new["doc"]["verdict"] = "no bottleneck found"
    new["doc"]["diagnoses"][0]["severity"] = "warning"
    assert {d[0] for d in diffs(old, new)} == {"$.doc.verdict", "$.doc.diagnoses[id=dataloader_stall].severity"}


def test_a_new_key_a_lost_key_and_a_type_change_fail():
    old, new = entry(), entry()
    new["doc"]["metrics"]["new_metric"] = 1.0
    del new["doc"]["summary"]["note"]
    new["doc"]["run"]["world_size"] = "2"
    assert {d[0] for d in diffs(old, new)} == {"$.doc.metrics.new_metric", "$.doc.summary.note", "$.doc.run.world_size"}
    new = entry()
    new["doc"]["metrics"]["mfu_pct"] = 0.0 if old["doc"]["metrics"]["mfu_pct"] is None else None
    assert [d[0] for d in diffs(old, new)] == ["$.doc.metrics.mfu_pct"]


def test_a_refusal_that_now_analyses_fails_and_the_other_way():
    refused = entry("corpus/lightning_bug_report_cpu")
    assert {d[0] for d in diffs(refused, entry())} >= {"$.ok", "$.doc", "$.error", "$.exit_code"}
    changed = copy.deepcopy(refused)
    changed["error"] = changed["error"].replace("no trace", "no step")
    assert [d[0] for d in diffs(refused, changed)] == ["$.error"]


def test_the_message_names_run_path_values_and_how_to_regenerate():
    old, new = entry(), entry()
    new["doc"]["verdict"] = "healthy"
    msg = golden.explain("ddp_slow_data", diffs(old, new))
    assert msg.startswith("ddp_slow_data: ") and "$.doc.verdict: golden 'dataloader_stall" in msg
    assert "-> now 'healthy'" in msg and "python -m tests.golden.record ddp_slow_data" in msg


def test_the_golden_test_fails_on_a_changed_golden(monkeypatch):
    """The test's own assertion (test_golden.assert_same) on a changed result: pytest fails."""
    from tests.golden import test_golden

    new = entry()
    new["doc"]["diagnoses"] = []
    with pytest.raises(pytest.fail.Exception, match=r"(?s)ddp_slow_data: .*diagnoses\[id=dataloader_stall\]: golden"):
        test_golden.assert_same("ddp_slow_data", new)


def test_normalise_replaces_the_runs_path_everywhere():
    p = golden.TRACES / "ddp_slow_data"
    doc = {"path": str(p), "note": f"see {golden.run_arg(p)}/manifest.json", "n": 1}
    assert golden.normalise(doc, p) == {"path": "<RUN>", "note": "see <RUN>/manifest.json", "n": 1}
