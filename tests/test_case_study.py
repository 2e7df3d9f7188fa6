"""The case study's ladder at CPU scale (2 gloo ranks): each rung's problem is diagnosed, the next
rung applies the tool's own recommendation, and that problem is gone after it."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import ROOT, run

pytestmark = pytest.mark.slow
SEVERE = ("warning", "critical")


@pytest.fixture(scope="module")
def ladder(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("case")
    r = run([sys.executable, str(ROOT / "case_studies/utilisation_30_to_85/ladder.py"), "--scale", "cpu", "--out", str(out)],
            timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return {e["rung"]: e for e in json.loads((out / "results.json").read_text())["rungs"]}


def ids(entry: dict, severities=SEVERE) -> set[str]:
    return {d["id"] for d in entry["diagnoses"] if d["severity"] in severities}


def test_baseline_is_input_bound_and_the_gathers_show_once_input_is_fixed(ladder):
    base = ladder["0_baseline"]
    assert "dataloader_stall" in ids(base)
    assert base["breakdown_pct"]["dataloader"] >= 20
    # the redundant all-gathers are there from the start; they stand out once the stall is gone
    assert "redundant_allgather" in ids(base, ("info", *SEVERE))


def test_each_rung_applies_the_fix_the_tool_recommended(ladder):
    assert ladder["1_more_workers"]["vs_previous"]["fix_of"] == ["dataloader_stall"] or \
        "dataloader_stall" in ladder["1_more_workers"]["vs_previous"]["fix_of"]
    assert "dataloader_stall" in ladder["2_preload_shm"]["vs_previous"]["fix_of"]
    assert "redundant_allgather" in ladder["3_no_redundant_allgather"]["vs_previous"]["fix_of"]
    for rung in ("1_more_workers", "2_preload_shm", "3_no_redundant_allgather"):
        assert ladder[rung]["vs_previous"]["fix_followed"], rung


def test_each_fix_resolves_its_problem_and_speeds_up(ladder):
    assert "dataloader_stall" not in ids(ladder["2_preload_shm"])
    assert "redundant_allgather" in ids(ladder["2_preload_shm"])
    assert "redundant_allgather" not in ids(ladder["3_no_redundant_allgather"], ("info", *SEVERE))
    final = ladder["3_no_redundant_allgather"]
    # measured from the steps CSVs of whole runs; the input fixes take ~80 ms steps to ~25 ms on 2
    # cores. Rung by rung order is not asserted: on 2 shared cores the gathers' few ms are within
    # run-to-run noise (CI once measured rung 3 at 28.2 ms after rung 2's 25.0 ms); the GPU ladder's
    # RESULTS.md has the per-rung speed-ups, measured side by side
    assert final["speedup_vs_baseline"] > 1.5
    assert ladder["2_preload_shm"]["speedup_vs_baseline"] > 1.5
