"""One definition of step time and tokens/s.

(a) the dataloader_stall title said "of 97.6 ms" (the steps CSV's unprofiled steps) under a table
of 111.7 ms steps (the profiled ones): the title now names the steps its figures cover, and its
figure is the one the CLI or ``workbench compare`` prints for those steps.
(b) ``workbench compare`` gave ``traces/case_gpu_2_preload_shm`` 57,306 tokens/s (step 0's
start-up and the profiled steps counted) where the case study's RESULTS.md gave 139,352: both now
use the steady steps of ``workbench.format.steady``.
"""

from __future__ import annotations

import io
import json
import re

import pandas as pd
import pytest

from tests.conftest import ROOT
from workbench.cli.console import print_analysis
from workbench.pipeline.compare import compare_runs
from workbench.pipeline.verdict import analyze_run

pytestmark = pytest.mark.committed

TRACES = ROOT / "traces"
CASE = ROOT / "case_studies" / "utilisation_30_to_85"


def cli_output(analysis) -> str:
    from rich.console import Console

    buf = io.StringIO()
    doc = json.loads(json.dumps(analysis.to_json(), default=str))  # as the CLI prints it
    print_analysis(doc, Console(file=buf, width=200, highlight=False, no_color=True))
    return buf.getvalue()


def stall(analysis):
    (d,) = [d for d in analysis.diagnoses if d.id == "dataloader_stall"]
    return d


def test_tokens_per_s_is_the_steady_steps_by_hand():
    df = pd.read_csv(TRACES / "case_gpu_2_preload_shm" / "steps_rank0.csv")
    # by hand: steps 1..29 less the profiler's warm-up 6..7 and the recorded 8..11 (schedule 6,2,4:
    # 23 steps of 16,384 tokens), host clock. Counting the warm-up steps would give 139,237.
    steady = df[(df["step"] >= 1) & ~df["step"].isin([6, 7, 8, 9, 10, 11])]
    assert len(steady) == 23
    expected = len(steady) * 16384 / (steady["step_ms"].sum() / 1e3)
    m = analyze_run(TRACES / "case_gpu_2_preload_shm").metrics()
    assert m["tokens_per_s"] == pytest.approx(expected, rel=1e-4)
    assert m["tokens_per_s"] == pytest.approx(139_452, abs=1)  # as RESULTS.md reports
    assert m["steady_step_ms"] == pytest.approx(steady["step_ms"].mean(), abs=1e-3)


@pytest.mark.slow  # analyzes two GPU runs (~3 s on 2 shared cores)
def test_compare_and_the_case_study_report_the_same_tokens_per_s():
    cmp = compare_runs(analyze_run(TRACES / "case_gpu_1_more_workers").result(), analyze_run(TRACES / "case_gpu_2_preload_shm").result()).to_json()
    rows = {r["metric"]: r for r in cmp["metrics"]}
    rungs = {r["rung"]: r for r in json.loads((CASE / "results_gpu.json").read_text())["rungs"]}
    table = (CASE / "RESULTS.md").read_text()
    for side, rung in (("a", "1_more_workers"), ("b", "2_preload_shm")):
        assert rows["tokens_per_s"][side] == pytest.approx(rungs[rung]["tokens_per_s"], rel=1e-6), rung
        assert rows["steady_step_ms"][side] == pytest.approx(rungs[rung]["step_ms"], rel=1e-6), rung
        row = re.search(rf"^\| {rung} \|(.*)$", table, re.M).group(1).split("|")
        assert row[2].strip() == f"{rows['steady_step_ms'][side]:.1f}", rung
        assert row[3].strip() == f"{rows['tokens_per_s'][side]:,.0f}", rung


def test_steady_steps_are_timed_on_the_gpu_clock_where_captured():
    # the host runs ahead under CUDA graphs: its step_ms is not what the GPU did
    df = pd.read_csv(ROOT / "tests" / "analysis" / "data" / "gpu_host_ahead_graphs" / "steps_rank0.csv")
    # schedule 1,1,3: step 1 is the profiler's warm-up and steps 2-4 are recorded; this run
    # predates capture_ms, so step 5's GPU time holds part of the trace export (14.5 ms against
    # 4.6): none of them is a steady step
    steady = df[(df["step"] >= 6) & (df["profiled"] == 0)]
    m = analyze_run(ROOT / "tests" / "analysis" / "data" / "gpu_host_ahead_graphs").metrics()
    assert m["steady_step_ms"] == pytest.approx(steady["gpu_step_ms"].mean(), rel=1e-4)
    assert m["steady_step_ms"] > 1.2 * steady["step_ms"].mean()


def test_stall_title_from_profiled_steps_quotes_the_cli_table():
    a = analyze_run(TRACES / "fault_slow_data")
    d = stall(a)
    # the stall was seen in the recorded steps (3-5, 2 the profiler's warm-up); one number per metric:
    # its wait is the job's own (data_wait_ms of the steps CSVs), as the CLI table's dataloader column,
    # of the job's step, so the title names the job's steps as the CLI's table title does
    assert d.evidence["steps_covered"] == "unprofiled steps 1, 6–7 (3 per rank, host clock)"
    assert d.evidence["wait_from"] == "unprofiled steps 1, 6–7"
    assert d.evidence["share_pct"] == d.evidence["run_share_pct"]
    assert d.title.endswith(f"of {a.per_rank['step_ms'].mean():.1f} ms, unprofiled steps 1, 6–7)")
    assert f"{d.evidence['dataloader_ms_per_step']:.1f}" == f"{a.per_rank['dataloader_ms'].mean():.1f}"
    out = cli_output(a)
    assert "3 profiled step(s)" in out
    assert "the mean of unprofiled steps 1, 6–7 (3 per rank, host clock)" in " ".join(out.split())
    figure = re.search(r"of ([\d.]+) ms, unprofiled", d.title).group(1)
    table_steps = re.findall(r"^│\s+\d+ │\s+([\d.]+) │", out, re.M)  # the table's step column, one row per rank
    # the table's rows are each rank's job step; the title their mean
    assert table_steps == [f"{x:.1f}" for x in a.per_rank["step_ms"]]
    assert figure == f"{a.per_rank['step_ms'].mean():.1f}"


def test_stall_title_from_unprofiled_steps_names_them_and_quotes_compare():
    a = analyze_run(TRACES / "case_gpu_0_baseline")
    d = stall(a)
    m = a.metrics()
    # the recorded steps took 1,020 ms; the CLI's table, the title and compare all give the job's
    # step (the mean of the unprofiled steps, the warm-up steps 6-7 left out: 23 of them)
    assert f"{a.to_json()['summary']['trace_step_ms']:.1f}" == "1020.2"
    assert f"{a.per_rank['step_ms'].iloc[0]:.1f}" == f"{m['steady_step_ms']:.1f}" == "808.1"
    # steps 6-7 the profiler's warm-up, 8-11 recorded: not in the job's step
    assert d.evidence["steps_covered"] == "unprofiled steps 1–5, 12–29 (23 steps, host clock)" and d.evidence["steps"] == 23
    assert d.title.endswith(f"of {m['steady_step_ms']:.1f} ms, unprofiled steps 1–5, 12–29)")
