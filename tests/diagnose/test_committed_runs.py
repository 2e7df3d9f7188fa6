"""Diagnoses on the committed sample runs (traces/, made by traces/make_cpu_samples.sh and the
GPU scripts): each rule fires (≥ warning) where its problem was planted and stays quiet on the
twin without it. No processes are started: these read real traces only."""

from __future__ import annotations

import pytest

from workbench.load import load_run

from tests.conftest import TRACES
from workbench.pipeline.verdict import analyze_run

SEVERE = ("warning", "critical")


def diag(run: str) -> dict[str, str]:
    return {d.id: d.severity for d in analyze_run(TRACES / run).diagnoses}


def serious(run: str) -> set[str]:
    return {i for i, s in diag(run).items() if s in SEVERE}


@pytest.mark.committed
def test_healthy_engine_run_has_no_warning():
    """What the rules say of a healthy 2-rank run, on a committed one (the live gloo twins in
    test_diagnoses_gloo.py hold timing-based rules to margins only: load on the machine moves them)."""
    assert serious("engine_healthy") == set(), diag("engine_healthy")
    metrics = analyze_run(TRACES / "engine_healthy").to_json()["metrics"]
    assert metrics["exposed_comm_pct"] < 20 and metrics["straggler_work_ratio"] < 1.1


@pytest.mark.committed
@pytest.mark.parametrize("rule,fires,quiet", [
    ("dataloader_stall", "fault_slow_data", "engine_healthy"),
    ("dataloader_stall", "ddp_slow_data", "ddp_fixed_data"),
    ("redundant_allgather", "fault_redundant_allgather", "engine_ddp"),
    ("straggler_rank", "fault_straggler", "engine_healthy"),
    # m = 8 over 2 stages: 18 % idle on CPU gloo (ideal 11 %), below the warning band
    ("pipeline_bubble", "engine_pp_gpipe_m2", "../tests/analysis/data/pp_direct_m8"),
    ("exposed_communication", "engine_zero1", "engine_healthy"),
    ("exposed_communication", "ddp_fixed_data", "ddp_slow_data"),
    ("oom_risk", "gpu_memory_heavy", "gpu_fixed_data"),
    ("training_instability", "fault_lr_spike", "engine_healthy"),
    ("nonfinite_loss", "fault_nan_loss", "fault_lr_spike"),
    ("expert_imbalance", "engine_moe_skewed", "engine_moe_balanced"),
])
def test_rule_fires_on_the_planted_problem_only(rule, fires, quiet):
    assert rule in serious(fires), (fires, diag(fires))
    assert rule not in serious(quiet), (quiet, diag(quiet))


@pytest.mark.committed
def test_straggler_names_rank_1():
    d = next(d for d in analyze_run(TRACES / "fault_straggler").diagnoses if d.id == "straggler_rank")
    assert d.ranks == [1] and d.evidence["rank"] == 1
    # rank 1 ran the forward 8 extra times: far over the critical band (1.6x), also against the
    # job's step (one job step for both ranks, so the ratio of their work stands)
    assert d.severity == "critical" and d.evidence["work_ratio"] >= 3.0


@pytest.mark.committed
def test_pipeline_bubble_is_larger_with_fewer_microbatches():
    from workbench.analysis.frames import RankFrames
    from workbench.diagnose.rules.pipeline_bubble import PP_BUBBLE

    def measured_bubble(run):
        """The bubble frame of each rank (whether or not the rule fires): mean share, micro-batches."""
        r = load_run(TRACES / run)
        per = [RankFrames.of_trace(t, rank)[PP_BUBBLE] for rank, t in r.traces.items()]
        return sum(v["bubble_pct"] for v in per) / len(per), {v["microbatches"] for v in per}

    # GPipe annotates its actions (Forward i / Backward i); torch's 1F1B annotates none, so its
    # bubble is the stages' blocked point-to-point waits and m the transfers per step
    (m2, mb2), (m8, mb8) = measured_bubble("engine_pp_gpipe_m2"), measured_bubble("engine_pp_1f1b_m8")
    assert mb2 == {2} and mb8 == {8}
    # fewer micro-batches, bigger bubble: (p-1)/(m+p-1) is 1/3 at m=2, 1/9 at m=8
    assert m2 > m8 + 20
    d = next(d for d in analyze_run(TRACES / "engine_pp_gpipe_m2").diagnoses if d.id == "pipeline_bubble")
    assert d.evidence["bubble_pct"] == pytest.approx(m2, abs=1.0)


@pytest.mark.committed
def test_oom_risk_reports_headroom_in_gib():
    d = next(d for d in analyze_run(TRACES / "gpu_memory_heavy").diagnoses if d.id == "oom_risk")
    assert any("headroom" in k and "gib" in k.lower() for k in d.evidence), d.evidence


@pytest.mark.live
def test_compare_slow_and_fixed_data_cli():
    """`workbench compare --json` on the gloo slow-data run and its fixed twin."""
    import json

    from tests.conftest import workbench

    r = workbench("compare", "--json", TRACES / "ddp_slow_data", TRACES / "ddp_fixed_data")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    resolved = {d["id"]: d for d in out["resolved"]}
    assert "dataloader_stall" in resolved
    assert 1.0 < out["speedup_measured"] <= resolved["dataloader_stall"]["estimated_speedup_max"]
    assert resolved["dataloader_stall"]["within_estimate"] is True


@pytest.mark.committed
def test_nccl_collectives_read_from_record_param_comms():
    """A real NCCL trace (FSDP2, one H200, world size 1: only the loss all-reduce communicates):
    the inventory's size, dtype and group come from record_param_comms' metadata."""
    a = analyze_run(TRACES / "gpu_fsdp2_370m")
    inv = [c for c in a.to_json()["collectives"] if c["op"] == "all_reduce"]
    assert inv, a.to_json()["collectives"]
    c = inv[0]
    assert c["bytes"] == 4 and c["group_size"] == 1 and c["dtype"].lower().startswith("float")
    assert c["calls_per_step"] == 1


@pytest.mark.committed
def test_training_instability_points_at_the_step_after_the_lr_spike():
    # the engine multiplied the learning rate by 1000 for optimizer step 4: step 5 is the first
    # loss computed with the damaged weights
    d = next(d for d in analyze_run(TRACES / "fault_lr_spike").diagnoses if d.id == "training_instability")
    assert d.evidence["first_step"] == 5 and d.ranks == [0, 1]
    assert {e["metric"] for e in d.evidence["events"] if e["step"] == 5} == {"loss", "grad_norm"}
