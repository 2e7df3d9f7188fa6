"""Diagnoses on real 2-rank gloo runs with and without each fault (tests/scripts/faults_ddp.py).

These runs are timed live, on a machine other jobs share: a rank the OS parks runs longer, which
is what straggler_rank and exposed_communication measure (a healthy run at load ~10 on 2 cores
read "rank 1 works 1.38x the others"). So what depends on timing is held to margins against
its planted twin run in the same session, and what the rules must say of a healthy run at
their thresholds is asserted on the committed runs (tests/diagnose/test_committed_runs.py:
traces/engine_healthy has no warning). Counts (gathers per step, the loss spike) are exact.
"""

from __future__ import annotations

import pandas as pd
import pytest

from tests.conftest import load_json_trace
from workbench.pipeline.verdict import analyze_run

pytestmark = [pytest.mark.slow, pytest.mark.live]


def found(analysis, rule_id):
    return next((d for d in analysis.diagnoses if d.id == rule_id), None)


def serious(analysis):
    return [d.id for d in analysis.diagnoses if d.severity != "info"]


# Rules whose signal is CPU time of one rank against another's (load on a shared machine moves it)
TIMED = {"straggler_rank", "exposed_communication"}


def work_ratio(analysis) -> float:
    """straggler_rank's signal: the slowest rank's work over the others' (1.0 when it is silent)."""
    d = found(analysis, "straggler_rank")
    return d.evidence["work_ratio"] if d is not None else 1.0


def test_healthy_run_has_no_planted_fault(fault_runs):
    a = analyze_run(fault_runs("healthy"))
    assert [i for i in serious(a) if i not in TIMED] == [], [(d.id, d.title) for d in a.diagnoses]
    # its ranks do the same work: whatever the load made of them, far from the planted straggler
    # (rank 1 runs the forward 8 extra times: 4.8x on the committed twin, traces/fault_straggler)
    # Live on a shared 2-core machine the planted straggler read 1.24-1.49x (two ranks and gloo's
    # polling threads share the cores); the healthy twin stays below it and below the warning band.
    healthy, planted = work_ratio(a), work_ratio(analyze_run(fault_runs("straggler")))
    assert healthy < planted and healthy < 1.3


def test_straggler_names_the_slow_rank(fault_runs):
    a = analyze_run(fault_runs("straggler"))
    d = found(a, "straggler_rank")
    # the rule names the slow rank live; its severity is held on the committed twin
    # (tests/diagnose/test_committed_runs.py: 4.7x, critical), a live run under load read 1.24x
    assert d is not None, a.diagnoses
    assert d.ranks == [1] and d.evidence["rank"] == 1
    assert d.evidence["work_ratio"] >= 1.1
    assert d.estimated_gain["speedup_max"] > 1.0
    assert work_ratio(analyze_run(fault_runs("healthy"))) < d.evidence["work_ratio"]


def direct_allgathers_per_step(run_dir) -> float:
    """c10d all-gathers inside ProfilerStep windows, straight from rank 0's JSON."""
    ev = load_json_trace(run_dir / "rank0.pt.trace.json.gz")["traceEvents"]
    steps = [e for e in ev if e.get("name", "").startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"]
    gathers = [e for e in ev if e.get("name", "").startswith("c10d::") and "allgather" in e["name"]]
    inside = [g for g in gathers if any(s["ts"] <= g["ts"] < s["ts"] + s["dur"] for s in steps)]
    return len(inside) / len(steps)


def test_redundant_allgather_fires_on_the_fault_and_not_without(fault_runs):
    a = analyze_run(fault_runs("redundant"))
    d = found(a, "redundant_allgather")
    assert d is not None and d.severity in ("warning", "critical"), a.diagnoses
    # 2 micro-batches × 1 gather of the same flat parameters; DDP needs none (1 allowed)
    assert direct_allgathers_per_step(fault_runs("redundant")) == 2
    assert d.evidence["redundant_calls_per_step"] == pytest.approx(1.0)
    inv = a.collectives()
    ag = inv[(inv["rank"] == 0) & (inv["op"] == "all_gather")]
    # 4·d² + 16·d² + 5·d + 1 parameters at d = 256, float32, gathered from 2 ranks
    n = 4 * 256 * 256 + 4 * 256 + 4 * 256 * 4 * 256 + 4 * 256 + 4 * 256 + 1
    assert ag["bytes"].iloc[0] == 2 * n * 4 and ag["calls_per_step"].iloc[0] == 2
    assert found(analyze_run(fault_runs("healthy")), "redundant_allgather") is None


def test_fsdp_regather_per_microbatch_fires_and_kept_layout_does_not(fault_runs):
    a = analyze_run(fault_runs("fsdp_regather"))
    d = found(a, "redundant_allgather")
    assert d is not None and d.severity in ("warning", "critical"), a.diagnoses
    # 4 micro-batches × (forward + backward) = 8 gathers per layer per step where 2 are needed
    assert {g["calls_per_step"] for g in d.evidence["groups"] if g["nelems"] > 1e5} == {8.0}
    inv = a.collectives()
    assert set(inv["op"]) >= {"all_gather", "reduce_scatter"}
    b = analyze_run(fault_runs("fsdp_kept"))
    assert found(b, "redundant_allgather") is None, [(x.id, x.title) for x in b.diagnoses]


def test_training_instability_from_the_steps_csv(fault_runs):
    run = fault_runs("redundant")
    a = analyze_run(run)
    d = found(a, "training_instability")
    assert d is not None and d.severity in ("warning", "critical")
    losses = pd.read_csv(run / "steps_rank0.csv")["loss"]
    assert d.evidence["first_step"] == 5 or d.evidence["first_step"] == 4
    # the LR ×1e4 at step 4 makes step 5's loss jump far above the falling curve before it
    assert losses[5] > 2 * losses[1:5].median()
    assert found(analyze_run(fault_runs("healthy")), "training_instability") is None


def test_compare_json_on_fault_and_fix(fault_runs):
    from tests.conftest import workbench
    import json

    r = workbench("compare", "--json", fault_runs("fsdp_regather"), fault_runs("fsdp_kept"))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["json_schema"] == "workbench.compare/1"
    assert "redundant_allgather" in [x["id"] for x in out["resolved"]]
