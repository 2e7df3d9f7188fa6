"""AppTest smoke tests of every page on the committed sample runs."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT, TRACES


@pytest.fixture
def app(monkeypatch):
    monkeypatch.setenv("WORKBENCH_TRACES", str(TRACES))
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)


def test_overview_shows_verdict_chart_and_diagnosis(app):
    app.query_params["run"] = "ddp_slow_data"
    app.run()
    assert not app.exception
    texts = " ".join(str(m.value) for m in [*app.markdown, *app.error, *app.warning, *app.success])
    assert "dataloader_stall" in texts and "Verdict" in texts
    charts = app.get("plotly_chart")
    assert charts, "no plotly chart on the overview"
    assert '"rank 0"' in charts[0].proto.spec and '"dataloader"' in charts[0].proto.spec


def test_healthy_run_has_no_warning(app):
    app.query_params["run"] = "ddp_fixed_data"
    app.run()
    assert not app.exception
    assert app.success and "no bottleneck" in app.success[0].value


def test_runs_page_lists_committed_runs(monkeypatch):
    monkeypatch.setenv("WORKBENCH_TRACES", str(TRACES))
    at = AppTest.from_function(_runs_page_only, default_timeout=60)
    at.run()
    assert not at.exception
    names = at.dataframe[0].value["name"].tolist()
    assert {"ddp_slow_data", "ddp_fixed_data"} <= set(names)


def _runs_page_only():
    from workbench.ui.pages import runs_page

    runs_page()
