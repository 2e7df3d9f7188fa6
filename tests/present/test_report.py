"""``workbench report RUN --html OUT.html``: one offline HTML file with the app's figures."""

from __future__ import annotations

import html
import json
import re

import pytest

from tests.conftest import TRACES, workbench


@pytest.mark.live
def test_report_is_self_contained_with_figures_and_diagnoses(tmp_path):
    out = tmp_path / "slow.html"
    r = workbench("report", TRACES / "ddp_slow_data", "--html", out, timeout=120)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    # plotly's JS inlined exactly once, no external script/style/font
    assert len(re.findall(r"<script[^>]*\bsrc\s*=", text)) == 0
    assert not re.search(r"<link[^>]+href=\"https?:", text)
    assert text.count("Plotly.newPlot") >= 5 and text.count("plotly.js v") == 1
    assert "Verdict: dataloader_stall" in text and 'id="dataloader_stall"' in text
    titles = set(re.findall(r'"title":\{"text":"([^"]+)"', text))
    assert {"Where each step goes, per rank", "Timeline: what each rank was doing", "Collective bytes per step",
            "Memory over time"} <= titles
    assert any(t.startswith("CPU samples") for t in titles)


@pytest.mark.live
def test_report_errors_are_one_line(tmp_path):
    r = workbench("report", tmp_path / "nope", "--html", tmp_path / "x.html", timeout=120)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "no such run" in r.stderr
    r = workbench("report", TRACES / "ddp_slow_data", "--html", tmp_path / "x.pdf", timeout=120)
    assert r.returncode == 2 and "ending in .html" in r.stderr
    assert not (tmp_path / "x.pdf").exists()


@pytest.mark.live
def test_report_help_has_an_example():
    r = workbench("report", "--help", timeout=60)
    assert r.returncode == 0 and "workbench report traces/ddp_slow_data --html" in r.stdout


@pytest.mark.live
def test_fixed_run_report_matches_the_analysis(tmp_path):
    from workbench.pipeline.verdict import analyze_run

    out = tmp_path / "fixed.html"
    assert workbench("report", TRACES / "ddp_fixed_data", "--html", out, timeout=120).returncode == 0
    text = out.read_text()
    expected = analyze_run(TRACES / "ddp_fixed_data")
    assert 'id="dataloader_stall"' not in text
    assert all(f'id="{d.id}"' in text for d in expected.diagnoses)
    assert html.escape(expected.verdict) in text


@pytest.mark.committed
def test_report_shows_the_cli_mfu_and_plain_evidence():
    """One MFU (``efficiency.mfu_pct`` of --json) in the CLI, the app and the report; evidence as
    --json prints it (not "MFU —" on gpu_slow_data, not np.float64(…))."""
    from workbench.present.report import render
    from workbench.present.shown import shown

    s = shown(TRACES / "gpu_slow_data")
    text = render(s)
    a = s.analysis()
    mfu = s.result.efficiency.mfu_pct
    # 3.2 % of the recorded steps; 3.8 % of the job's step (the recorded steps ran 1.2× slower)
    assert round(mfu, 1) == 3.8 and f"MFU<b>{mfu:.1f}%</b>" in text
    assert "np.float64" not in text and "np.int64" not in text
    for d in a.diagnoses:
        for k, v in d.evidence.items():
            if isinstance(v, dict):
                assert html.escape(json.dumps(v, default=str, ensure_ascii=False)) in text
