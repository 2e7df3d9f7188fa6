"""One step figure, one definition, everywhere: the job's step (the mean of the unprofiled steady
steps, docs/analyze.md "The job's numbers, not the profiler's") is the same number with the same
step set and the same words in the CLI's text, ``--json``'s summary and metrics, the capture line and
the note, ``dataloader_stall``, the app's Overview and Efficiency pages, the HTML report and compare.

Committed runs of each kind: CPU gloo runs whose stall is read on the unprofiled steps
(ddp_slow_data) or the profiled ones (fault_slow_data), a bursty loader (engine_zero1, whose
medians put the capture at 2.06× and the means at 1.06×), GPU runs on the host's clock
(gpu_fsdp2_370m, case_gpu_0_baseline), on the GPU's (plan_gpu_370m_b16) and on the trace's
(gpu_memory_heavy: the host ran ahead).
"""

from __future__ import annotations

import html
import io
import re

import pytest
from rich.console import Console
from streamlit.testing.v1 import AppTest

from tests.conftest import TRACES
from workbench.format.steady import parse_step_set
from workbench.cli.console import print_analysis
from workbench.pipeline import analyze
from workbench.pipeline.compare import compare_runs
from workbench.present.report import render

pytestmark = pytest.mark.committed

RUNS = ("ddp_slow_data", "fault_slow_data", "engine_zero1", "gpu_fsdp2_370m", "case_gpu_0_baseline", "plan_gpu_370m_b16",
        "gpu_memory_heavy")
STEPS_WORDS = re.compile(r"(?:unprofiled|recorded) steps? ([\d–, ]*\d)")


def cli_text(result) -> str:
    buf = io.StringIO()
    print_analysis(result.to_json(), Console(file=buf, width=400, no_color=True, highlight=False))
    return buf.getvalue()


def figures(text: str, unit: str = "ms") -> list[str]:
    return re.findall(rf"([\d,]+\.\d) {unit}", text)


@pytest.mark.parametrize("run", RUNS)
def test_every_place_states_the_jobs_step_alike(run, monkeypatch):
    a = analyze(TRACES / run)
    res, an = a.result, a.analysis()
    s, m = res.summary, res.metrics
    step = s.step_ms
    shown = f"{step:.1f}"
    # --json: summary and metrics, one figure (steady_step_ms is step_ms where the CSVs gave it)
    assert m.step_ms == pytest.approx(step, abs=1e-3)
    assert m.steady_step_ms is None or m.steady_step_ms == m.step_ms
    assert [f"{r['step_ms']:.1f}" for r in s.per_rank] == [shown] * len(s.per_rank)
    # the step set: the job's steps, none of them profiled, counted per rank
    profiled = {int(x) for x in an.trace_breakdown["step"]}
    job_steps = set()
    for row in s.job or ():
        mine = set(parse_step_set(row["step_set"]))
        assert len(mine) == row["steps"]
        assert row["clock"] == "trace" or not mine & profiled, (row, profiled)
        job_steps |= mine
    words = s.steps_covered
    if s.job:
        assert words.startswith("the job's step: the mean of ")
        counts = {int(n) for n in re.findall(r"\((\d+) (?:per rank|steps?),", words)}
        assert counts == {max(r["steps"] for r in s.job)}  # per rank, never summed over ranks
    # the capture's cost: one comparison, the same in summary, metrics, the note and the CLI
    over = s.capture_overhead
    cli = cli_text(res)
    if over:
        assert over["unprofiled_step_ms"] == pytest.approx(step, abs=1e-3)
        assert over["recorded_step_ms"] == pytest.approx(s.trace_step_ms, abs=1e-3)
        assert over["ratio"] == m.capture_overhead_ratio == pytest.approx(over["recorded_step_ms"] / step, abs=1e-3)
        line = f"profiled steps {over['recorded_step_ms']:.1f} ms vs the job's {shown} ms ({over['ratio']:.2f}×"
        assert line in cli
        if s.note:
            assert f"took {over['recorded_step_ms']:.1f} ms, the job's {shown} ms ({over['ratio']:.2f}×)" in s.note
    else:
        assert m.capture_overhead_ratio is None and not s.note
    # the CLI: its table rows and every unprofiled step figure it prints are the job's step
    assert " ".join(words.split()) in " ".join(cli.split())
    assert not re.search(r"ms unprofiled|medians", cli)
    for said in STEPS_WORDS.findall(" ".join(cli.split())):
        assert set(parse_step_set(said)) == job_steps, said
    # dataloader_stall: of the job's step, its steps in the summary's words
    stall = next((d for d in res.diagnoses if d.id == "dataloader_stall"), None)
    if stall is not None:
        assert f"of {shown} ms, " in stall.title
        assert stall.evidence["step_ms"] == pytest.approx(step, abs=0.01)
        assert stall.evidence["steps_covered"] in words
    # the HTML report
    page = render(a)
    assert f"<b>{shown} ms</b>" in page and html.escape(f"Step time is {words}") in " ".join(page.split())
    # the app's Overview and Efficiency pages
    monkeypatch.setenv("WORKBENCH_TRACES", str(TRACES))
    at = AppTest.from_function(_page, args=("overview_page",), default_timeout=120)
    at.query_params["run"] = run
    at.run()
    assert not at.exception
    metric = next(x for x in at.metric if x.label == "Step time")
    assert metric.value == f"{shown} ms" and metric.proto.help == words
    caption = " ".join(str(c.value) for c in at.caption)
    assert f"Step time is {words}." in caption
    if over:
        assert f"{over['ratio']:.2f}×" in caption and f"the job's {shown} ms" in caption
    if res.run.has_gpu and res.efficiency and res.efficiency.classes:
        at = AppTest.from_function(_page, args=("efficiency_page",), default_timeout=120)
        at.query_params["run"] = run
        at.run()
        achieved = next(x for x in at.metric if x.label in ("TFLOP/s achieved", "GFLOP/s achieved"))
        assert words in achieved.proto.help


def _page(name: str) -> None:
    from workbench.ui import pages

    {p.fn.__name__: p.fn for p in pages.registered()}[name]()


def test_compare_measures_the_speed_up_on_the_jobs_steps():
    a, b = (analyze(TRACES / r).result for r in ("case_gpu_0_baseline", "case_gpu_2_preload_shm"))
    cmp = compare_runs(a, b)
    assert cmp.speedup_measured == pytest.approx(a.summary.step_ms / b.summary.step_ms, rel=1e-4)
    rows = cmp.metrics.set_index("metric")
    for name in ("step_ms", "steady_step_ms"):
        assert rows.loc[name, "a"] == pytest.approx(a.summary.step_ms, abs=1e-3)
        assert rows.loc[name, "b"] == pytest.approx(b.summary.step_ms, abs=1e-3)
