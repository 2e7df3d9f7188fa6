"""A failed run's verdict, on committed runs where the failure is present and on one where it is absent
(traces/failed_*, made by tests/scripts/fail_train.py: traces/README.md)."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import TRACES
from workbench.cli import main as cli
from workbench.pipeline import Options, analyze
from workbench.present.shown import shown

pytestmark = pytest.mark.committed


def _result(name: str):
    return analyze(TRACES / name, Options(cache=False)).result


def test_oom_inside_the_recorded_window_is_the_headline():
    r = _result("failed_oom_backward")
    d = r.diagnoses[0]
    assert d.id == "out_of_memory" and d.severity == "critical" and r.verdict.startswith("out_of_memory: ")
    e = d.evidence
    # the message's own figures (tests/scripts/fail_train.py OOM_TEXT), the step and phase the capture recorded
    assert (e["rank"], e["step"], e["phase"], e["profiler_phase"]) == (0, 3, "backward", "record")
    assert (e["tried_to_allocate_gib"], e["capacity_gib"], e["free_gib"]) == (1.96, 139.8, 1.12)
    assert (e["allocated_gib"], e["reserved_unallocated_gib"], e["error_type"]) == (134.41, 3.59, "torch.OutOfMemoryError")
    assert e["non_pytorch_gib"] == pytest.approx(138.67 - 134.41 - 3.59, abs=0.01) and e["fragmentation"] is False
    # memory by category: the model states measured at the first optimizer step (Linear(64,256)+Linear(256,64):
    # 33,088 fp32 parameters; AdamW's two moments and a step counter per tensor), the rest from the failure
    mem = json.loads((TRACES / "failed_oom_backward" / "memory_rank0.json").read_text())["first_step"]
    assert mem["params_numel"] == 64 * 256 + 256 + 256 * 64 + 64 and mem["params_bytes"] == 4 * mem["params_numel"]
    assert mem["optimizer_bytes"] == 2 * mem["params_bytes"] + 4 * 4
    cats = r.memory["by_category"]
    assert r.memory["at"] == "out of memory" and cats["weights"]["bytes"] == mem["params_bytes"]
    assert cats["gradients"]["bytes"] == mem["grads_bytes"] and cats["optimizer"]["bytes"] == mem["optimizer_bytes"]
    assert cats["other"]["gib"] == 3.59 and r.memory["sum_gib"] == pytest.approx(134.41 + 3.59, abs=0.002)
    assert e["memory_by_category"]["activations"] == cats["activations"]["gib"]
    assert "the run failed" in r.run.warnings[-1] or any("the run failed" in w for w in r.run.warnings)


def test_oom_before_any_trace_still_gets_a_verdict(capsys):
    assert not (TRACES / "failed_oom_before_trace" / "rank0.pt.trace.json.gz").exists()
    assert cli.main(["analyze", "--no-cache", "--json", str(TRACES / "failed_oom_before_trace")]) == 0
    j = json.loads(capsys.readouterr().out)
    assert [d["id"] for d in j["diagnoses"]] == ["out_of_memory"] and j["summary"]["per_rank"] == []
    d = j["diagnoses"][0]
    assert (d["evidence"]["step"], d["evidence"]["phase"], d["evidence"]["profiler_phase"]) == (1, "backward", "warmup")
    assert any("no trace: the job failed before the profiler wrote one" in w for w in j["run"]["warnings"])
    assert j["memory"]["by_category"]["weights"]["source"].startswith("measured")
    assert cli.main(["analyze", "--no-cache", str(TRACES / "failed_oom_before_trace")]) == 0
    text = capsys.readouterr().out
    assert "CRITICAL out_of_memory" in text and "verdict: out_of_memory" in text and "memory: weights" in text


def test_a_collective_timeout_names_the_rank_that_never_joined():
    r = _result("failed_gloo_timeout")
    d = r.diagnoses[0]
    assert d.id == "job_failed" and r.run.status == "failed"
    assert d.evidence["ranks_timed_out"] == [0] and d.evidence["ranks_not_joining"] == [1] and d.ranks == (1,)
    assert d.evidence["timeouts"] == [{"rank": 0, "backend": "gloo", "timeout_ms": 5000, "op": "recv"}]
    assert d.evidence["phase"] == "communication" and d.evidence["step"] == 6
    assert "rank 1 never joined it" in d.title and r.verdict.startswith("job_failed: collective recv timed out on rank 0")


def test_a_run_that_completed_has_no_failure():
    r = _result("engine_ddp")
    assert not {"out_of_memory", "job_failed"} & {d.id for d in r.diagnoses}


def test_out_of_memory_is_answered_by_the_planner_unanchored(tmp_path):
    """A one-H200 torchtitan 8B run (its trace shows the model: 8.03B parameters, full recomputation) marked
    as failed with an out-of-memory error in step 6: the planner's alternatives that fit with headroom,
    fastest first, from the inferred model, not anchored on the failed run."""
    run = tmp_path / "run"
    shutil.copytree(TRACES / "corpus" / "torchtitan_8b_full_gpu", run, ignore=shutil.ignore_patterns(".workbench-cache"))
    oom = json.loads((TRACES / "failed_oom_backward" / "manifest.json").read_text())["ranks"]["0"]["error"]
    m = json.loads((run / "manifest.json").read_text())
    m.update(status="failed", exit_code=1, error=f"rank 0: {oom}")
    m["ranks"]["0"].update(error=oom, exit_code=1, steps=6, phase="backward", error_type="torch.OutOfMemoryError")
    (run / "manifest.json").write_text(json.dumps(m))
    r = shown(run, Options(cache=False)).result
    d = r.finding("out_of_memory")
    assert r.diagnoses[0] is d and d.alternatives
    assert all(not a["tight"] and a["headroom_pct"] >= 10 and "not anchored" in a["basis"] for a in d.alternatives)
    same = [a for a in d.alternatives if a["gpus"] == 1]
    assert [a["speedup"] for a in same] == sorted((a["speedup"] for a in same), reverse=True)
    planned = r.memory["planned"]
    assert planned["weights"] == pytest.approx(8.03e9 * 4 / 2**30, rel=0.01) and planned["optimizer"] == pytest.approx(2 * planned["weights"], rel=0.01)


def test_a_public_trainers_out_of_memory_is_answered_with_an_alternative_that_ran():
    """torchtitan's Llama 3 8B without recomputation at 8192 tokens on one H200, run unmodified: CUDA out
    of memory in step 1's forward (traces/corpus/torchtitan_8b_none_oom_gpu, its first step recorded).
    The verdict carries the failure's own figures and phase, memory by category measured at the first
    optimizer step, and the planner's one-GPU alternative — recompute full — whose run was measured
    (traces/corpus/torchtitan_8b_full_gpu): predicted peak within 10 %, step within 15 % (measured:
    −1.2 % and +11.1 %). The step the job failed in is left out of every measure (the capture marks it
    in the trace): with it, the layers read 28 of 32 and the alternative's peak −10 %."""
    run = TRACES / "corpus" / "torchtitan_8b_none_oom_gpu"
    r = shown(run, Options(cache=False)).result
    d = r.finding("out_of_memory")
    assert r.diagnoses[0] is d and d.severity == "critical"
    e = d.evidence
    assert (e["step"], e["phase"], e["rank"]) == (1, "forward", 0)
    assert (e["tried_to_allocate_gib"], e["capacity_gib"], e["allocated_gib"]) == (0.125, 139.8, 138.41)
    mem = json.loads((run / "memory_rank0.json").read_text())["first_step"]
    cats = e["memory_by_category"]
    assert cats["weights"] == pytest.approx(mem["params_bytes"] / 2**30, rel=0.05)
    assert cats["optimizer"] == pytest.approx(mem["optimizer_bytes"] / 2**30, rel=0.05)
    assert r.model.fields["layers"]["value"] == 32 and r.summary.steps == 1
    full = next(a for a in d.alternatives if a["gpus"] == 1 and "recompute full" in a["change"])
    measured = analyze(TRACES / "corpus" / "torchtitan_8b_full_gpu", Options(cache=False)).result.metrics
    assert full["memory_gib"] == pytest.approx(measured.peak_reserved_gib, rel=0.10)
    assert full["step_ms"] == pytest.approx(measured.step_ms, rel=0.15)
    assert "not anchored" in full["basis"] and not full["tight"]
