"""AppTest tests of every page on the committed sample runs (headless, ~0.2 s a page)."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT, TRACES
from workbench.verdict import analyze_run


@pytest.fixture
def app(monkeypatch):
    monkeypatch.setenv("WORKBENCH_TRACES", str(TRACES))
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)


def _page(name: str) -> None:
    from workbench.ui import pages

    getattr(pages, name)()


def open_page(monkeypatch, name: str, run: str | None = "ddp_slow_data", root=TRACES, **params) -> AppTest:
    monkeypatch.setenv("WORKBENCH_TRACES", str(root))
    at = AppTest.from_function(_page, args=(name,), default_timeout=120)
    if run:
        at.query_params["run"] = run
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(at: AppTest) -> str:
    parts = [*at.markdown, *at.error, *at.warning, *at.success, *at.info, *at.caption, *at.title, *at.subheader]
    return " ".join(str(m.value) for m in parts)


def specs(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def titles(at: AppTest) -> list[str]:
    return [s["layout"].get("title", {}).get("text", "") for s in specs(at)]


def test_overview_shows_verdict_chart_and_diagnosis(app):
    app.query_params["run"] = "ddp_slow_data"
    app.run()
    assert not app.exception
    texts_ = " ".join(str(m.value) for m in [*app.markdown, *app.error, *app.warning, *app.success])
    assert "dataloader_stall" in texts_ and "Verdict" in texts_
    charts = app.get("plotly_chart")
    assert charts, "no plotly chart on the overview"
    assert '"rank 0"' in charts[0].proto.spec and '"dataloader"' in charts[0].proto.spec
    assert app.error and "dataloader_stall" in app.error[0].value  # critical → red banner
    labels = [m.label for m in app.metric]
    assert labels[0] == "Step time" and labels[2:4] == ["MFU", "Exposed comm"] and labels[4].startswith("Peak memory")
    m = analyze_run(TRACES / "ddp_slow_data").metrics()
    assert labels[1] == "CPU busy (no GPU)" and app.metric[1].value == f"{m['compute_busy_pct']:.0f}%"
    # the numbers shown are the library's
    assert app.metric[0].value == f"{m['step_ms']:.1f} ms"
    assert app.metric[3].value == f"{m['exposed_comm_pct']:.0f}%"


def test_fixed_run_has_no_dataloader_stall(app):
    app.query_params["run"] = "ddp_fixed_data"
    app.run()
    assert not app.exception
    expected = analyze_run(TRACES / "ddp_fixed_data")
    banner = [*app.error, *app.warning, *app.success][0].value
    assert banner == f"**Verdict:** {expected.verdict}" and "dataloader_stall" not in banner
    shown = texts(app)
    assert all(f"**{d.id}**" in shown for d in expected.diagnoses)


def test_gpu_overview_has_busy_and_memory_vs_capacity(monkeypatch):
    at = open_page(monkeypatch, "overview_page", "gpu_slow_data")
    m = {x.label: x.value for x in at.metric}
    busy = float(m["GPU busy"].rstrip("%"))
    assert 0 < busy < 20, m  # a DataLoader-bound GPU: busy only a few % of the step
    assert m["Peak memory (GPU allocated)"].endswith("/ 140")  # H200: 140 GiB capacity
    assert "dataloader_stall" in texts(at)
    assert {"Where each step goes, per rank", "Step time and its DataLoader share, per step"} <= set(titles(at))


def test_timeline_lanes_and_zoom(monkeypatch):
    at = open_page(monkeypatch, "timeline_page")
    (spec,) = specs(at)
    lanes = {t["name"] for t in spec["data"]}
    assert {"step", "dataloader", "cpu ops", "communication"} <= lanes
    ys = {y for t in spec["data"] for y in t["y"]}
    assert {"rank 0 · dataloader", "rank 1 · dataloader"} <= ys
    bars = sum(len(t["y"]) for t in spec["data"])
    assert bars < 11144 / 10  # 11k events drawn as a few hundred bars
    # zoom to one step: every bar lies inside that step's window
    at.selectbox(key="zoom").select_index(2).run()  # options: all, 2, 3, 4
    assert not at.exception
    (spec,) = specs(at)
    step_lane = next(t for t in spec["data"] if t["name"] == "step")
    second = sorted(analyze_run(TRACES / "ddp_slow_data").breakdown["step"].unique())[1]
    assert set(_decode(step_lane["customdata"], 0)) == {f"step {second}"}


def _decode(customdata, col):
    return [row[col] for row in customdata]


def test_utilisation_cpu_fallback_and_nvml(monkeypatch):
    at = open_page(monkeypatch, "utilisation_page")
    (spec,) = specs(at)
    assert "CPU samples" in spec["layout"]["title"]["text"]
    assert at.dataframe[0].value["source"].tolist() == ["cpu", "cpu"]
    at = open_page(monkeypatch, "utilisation_page", "gpu_slow_data")
    (spec,) = specs(at)
    assert "GPU samples (NVML)" in spec["layout"]["title"]["text"]
    panels = {a["text"] for a in spec["layout"]["annotations"]}
    assert {"GPU utilisation (%)", "memory used (GiB)", "power (W)", "SM clock (MHz)"} <= panels


def test_communication_inventory_and_overlap(monkeypatch):
    at = open_page(monkeypatch, "communication_page")
    assert titles(at) == ["Collective bytes per step", "Communication per step: overlapped vs exposed"]
    inv = at.dataframe[0].value
    assert set(inv["rank"]) == {0, 1} and "all_reduce" in set(inv["op"])
    ov = at.dataframe[1].value
    assert list(ov["rank"]) == [0, 1]
    at = open_page(monkeypatch, "communication_page", "gpu_slow_data")  # one GPU: nothing to show, no crash
    assert "No collectives" in texts(at)


def test_memory_timeline_and_zero_what_if(monkeypatch):
    at = open_page(monkeypatch, "memory_page", "gpu_memory_heavy")
    assert titles(at) == ["Memory over time", "ZeRO what-if: memory per GPU"]
    table = at.dataframe[0].value
    assert set(table["stage"]) == {0, 1, 2, 3}
    # stage 0 at N_d = 8, Ψ = 1e9 (the default): 16 GB of model states + measured activations
    zero = table[(table["stage"] == 0) & (table["dp"] == 8)]["total (GiB)"].iloc[0]
    s3 = table[(table["stage"] == 3) & (table["dp"] == 8)]["total (GiB)"].iloc[0]
    assert zero > 16e9 / 2**30 - 0.01 and zero - s3 == pytest.approx(14e9 / 2**30, abs=0.02)
    assert at.metric[1].value == "140 GiB"


def test_diagnoses_page_sorted_with_evidence_fix_and_range(monkeypatch):
    at = open_page(monkeypatch, "diagnoses_page")
    t = texts(at)
    steps = sorted(analyze_run(TRACES / "ddp_slow_data").breakdown["step"].unique())
    assert "dataloader_stall" in t and "Fix:" in t and f"profiled steps {steps[0]}–{steps[-1]}" in t and "Estimated gain" in t
    ev = at.dataframe[0].value
    assert "share_pct" in set(ev["evidence"])
    shown = [line for line in texts(at).split(":red[■]")[1:]]
    ids = [d.id for d in sorted(analyze_run(TRACES / "ddp_slow_data").diagnoses,
                                key=lambda d: d.estimated_gain.get("step_time_saved_pct") or 0, reverse=True)]
    order = [i for i in ids if i in texts(at)]
    assert order == ids
    if len(ids) > 1:
        assert texts(at).index(f"**{ids[0]}**") < texts(at).index(f"**{ids[-1]}**")
    assert shown  # severities drawn as coloured squares


def test_runs_page_lists_committed_runs(monkeypatch):
    at = open_page(monkeypatch, "runs_page", run=None)
    table = at.dataframe[0].value
    assert {"ddp_slow_data", "ddp_fixed_data"} <= set(table["name"])
    row = table.set_index("name").loc["ddp_slow_data"]
    assert row["status"] == "ok" and row["world_size"] == 2 and row["verdict"].startswith("dataloader_stall")
    start = json.loads((TRACES / "ddp_slow_data" / "manifest.json").read_text())["start_utc"]
    assert row["date"] == start[:19].replace("T", " ")


def test_compare_page_side_by_side(monkeypatch):
    at = open_page(monkeypatch, "compare_page", run=None, a="ddp_slow_data", b="ddp_fixed_data")
    assert titles(at) == ["ddp_slow_data: ms per step", "ddp_fixed_data: ms per step", "B vs A: change per metric (%)"]
    t = texts(at)
    assert "Resolved in B" in t and "`dataloader_stall`" in t.split("Resolved in B")[1].split("New in B")[0]
    metrics = at.dataframe[0].value.set_index("metric")
    # A waits on input for most of the step; B below dataloader_stall's warning level (10 %)
    assert metrics.loc["dataloader_pct", "a"] > 40 and metrics.loc["dataloader_pct", "b"] < 10
    assert at.metric[0].label.startswith("Measured speed-up")
