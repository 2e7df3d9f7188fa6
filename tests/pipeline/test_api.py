"""The one pipeline (workbench.pipeline.analyze) and its typed result (workbench.pipeline.result)."""

from __future__ import annotations

import pytest

from tests.conftest import TRACES
from tests.golden import golden
from workbench.pipeline import Extra, Options, analyze
from workbench.pipeline.result import CATEGORIES, METRIC_NAMES, Result

GOLD = golden.load_golden()


@pytest.mark.unit
def test_the_result_reads_back_every_golden_document_unchanged():
    """``Result.from_json`` then ``to_json`` is every committed run's ``--json`` document: the one
    serializer loses nothing and adds nothing."""
    docs = {run: g["doc"] for run, g in GOLD.items() if g.get("ok")}
    assert len(docs) > 50
    for run, doc in docs.items():
        back = Result.from_json(doc).to_json()
        assert back == doc, run
    # and the fields a consumer reads are typed
    r = Result.from_json(docs["gpu_slow_data"])
    assert r.summary.step_ms == docs["gpu_slow_data"]["summary"]["step_ms"]
    assert r.metrics.peak_allocated_gib == docs["gpu_slow_data"]["metrics"]["peak_allocated_gib"]
    assert r.diagnoses[0].id == docs["gpu_slow_data"]["diagnoses"][0]["id"]
    assert r.efficiency.mfu_pct == docs["gpu_slow_data"]["efficiency"]["mfu_pct"]


@pytest.mark.unit
def test_the_metric_fields_name_every_metric_a_run_reports():
    """A metric the analysis reports but the typed result has no field for would be dropped."""
    from workbench.analysis.steps import CATEGORIES as ANALYSIS_CATEGORIES

    assert CATEGORIES == tuple(ANALYSIS_CATEGORIES)
    seen = {k for g in GOLD.values() if g.get("ok") for k in g["doc"]["metrics"]}
    assert seen <= set(METRIC_NAMES), seen - set(METRIC_NAMES)
    m = Result.from_json({"run": {"path": "x", "name": "x", "world_size": 1}, "summary": {},
                          "metrics": {"step_ms": 1.0, "not_a_metric": 2.0}}).metrics
    assert m.keys == ("step_ms",)  # an unknown key is not carried as a metric


@pytest.mark.committed
def test_analyze_caches_the_result_and_serves_it_without_the_analysis(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))
    run = TRACES / "ddp_slow_data"
    first = analyze(run, Options(workers=1))
    assert first._analysis is not None  # computed here
    again = analyze(run, Options(workers=1))
    assert again._analysis is None and again.result == first.result  # from the result cache
    assert again.analysis().result() == first.result  # the frames behind it, on demand
    fresh = analyze(run, Options(workers=1, cache=False))
    assert fresh._analysis is not None and fresh.result == first.result


@pytest.mark.committed
def test_an_extra_is_applied_once_and_cached_under_its_name(tmp_path, monkeypatch):
    from dataclasses import replace

    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))
    calls = []

    def mark(a):
        calls.append(a.path)
        return replace(a.result, verdict=a.result.verdict + " (marked)")

    extra = Extra("marked", mark)
    run = TRACES / "ddp_slow_data"
    one = analyze(run, Options(workers=1), extras=(extra,))
    two = analyze(run, Options(workers=1), extras=(extra,))
    plain = analyze(run, Options(workers=1))
    assert one.result.verdict.endswith("(marked)") and two.result == one.result and len(calls) == 1
    assert not plain.result.verdict.endswith("(marked)")
    names = sorted(p.name for p in (tmp_path / "cache").rglob("analysis*.json"))
    assert names == ["analysis+marked.json", "analysis.json"]


@pytest.mark.committed
def test_no_cache_writes_no_cache_even_where_the_planner_answers(tmp_path, monkeypatch):
    """``workbench analyze --no-cache`` on a GPU run whose findings the planner answers (the
    planner's calibration reads the run's frames from the analysis in hand, not from a cache)."""
    from workbench.cli.console import analysed

    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(cache))
    r = analysed(TRACES / "recompute_1p3b_b16_full", cache=False, workers=1).result
    assert any(d.alternatives for d in r.diagnoses)
    assert list(cache.iterdir()) == []
