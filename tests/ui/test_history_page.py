"""The History page (AppTest, headless) on committed runs: a run whose history holds a slowdown, a
hung run, a run from before the history, and a window opened while a job ran, listed as a run."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import DATA
from tests.ui.test_app import open_page, specs, texts, titles


@pytest.mark.committed
def test_a_slowdown_is_drawn_with_its_change_point_and_cause(monkeypatch):
    at = open_page(monkeypatch, "history_page", run="long_data_straggler", root=DATA)
    assert titles(at) == ["Step time over the whole run"]
    spec = specs(at)[0]
    assert {d["name"] for d in spec["data"] if d.get("showlegend", True)} == {"rank 0", "rank 1"}
    shapes = spec["layout"]["shapes"]
    assert any(s.get("type") == "line" and abs(s["x0"] - 300) <= 2 for s in shapes)  # the change point
    assert any(s.get("type") == "rect" for s in shapes)  # the launch window
    table = at.dataframe[0].value
    assert table["cause"].tolist() == ["data_wait"] and table["on ranks"].tolist() == ["1"]
    assert "mid_run_slowdown" in texts(at)


@pytest.mark.committed
def test_a_hung_run_shows_its_collective(monkeypatch):
    at = open_page(monkeypatch, "history_page", run="hang_stall_2rank", root=DATA)
    assert "collective_hang" in texts(at) and "did not enter all_reduce #31" in texts(at)
    assert any(s.get("line", {}).get("dash") == "dash" for s in specs(at)[0]["layout"]["shapes"])


@pytest.mark.committed
def test_a_run_without_history_says_so(monkeypatch):
    at = open_page(monkeypatch, "history_page", run="ddp_slow_data")
    assert "no step history" in texts(at) and not at.get("plotly_chart")


@pytest.mark.committed
def test_a_window_opened_on_a_job_is_a_run_of_the_sidebar(monkeypatch, tmp_path):
    run = tmp_path / "job"
    shutil.copytree(DATA / "long_data_straggler", run)
    w = run / "windows" / "w1"
    w.mkdir(parents=True)
    for r in (0, 1):
        shutil.copy(run / f"rank{r}.pt.trace.json.gz", w / f"rank{r}.pt.trace.json.gz")
    at = open_page(monkeypatch, "overview_page", run="job/windows/w1", root=tmp_path)
    assert at.sidebar.selectbox[0].value == "job/windows/w1"
    assert "job/windows/w1" in at.sidebar.selectbox[0].options
