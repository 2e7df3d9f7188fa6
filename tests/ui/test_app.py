"""AppTest tests of every page on the committed sample runs (headless, ~0.2 s a page)."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import DATA
from tests.conftest import ROOT, TRACES
from workbench.pipeline.verdict import analyze_run

pytestmark = pytest.mark.committed


@pytest.fixture
def app(monkeypatch):
    monkeypatch.setenv("WORKBENCH_TRACES", str(TRACES))
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)


def _page(name: str) -> None:
    from workbench.ui import pages

    {p.fn.__name__: p.fn for p in pages.registered()}[name]()


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


def unescaped(text) -> str:
    """A static table's cell as written (workbench.ui.widgets.as_text escapes markdown)."""
    return re.sub(r"\\(.)", r"\1", str(text))


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
    peak = next(x for x in at.metric if x.label == "Peak memory")
    assert peak.value.endswith(" GiB") and peak.proto.delta.endswith("of 140 GiB")  # H200: 140 GiB capacity
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


def _values(arr) -> list:
    """A figure array from the spec: plotly writes numpy arrays as {"dtype", "bdata": base64}."""
    if isinstance(arr, dict):
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(arr["bdata"]), dtype=arr["dtype"]).tolist()
    return list(arr)


def _decode(customdata, col):
    return [row[col] for row in customdata]


def test_utilisation_cpu_fallback_and_nvml(monkeypatch):
    at = open_page(monkeypatch, "utilisation_page")
    (spec,) = specs(at)
    assert "CPU samples" in spec["layout"]["title"]["text"]
    table = at.dataframe[0].value  # one row per rank and quantity
    assert set(table["source"]) == {"cpu"} and sorted(set(table["rank"])) == [0, 1]
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


def test_memory_by_category_of_a_run_that_ran_out_of_memory(monkeypatch):
    # the committed CPU run whose step 3 raised torch.OutOfMemoryError: the model states the capture
    # measured, the rest from the failure's own figures, as --json's memory says
    at = open_page(monkeypatch, "memory_page", "failed_oom_backward")
    bar = next(s for s in specs(at) if s["layout"]["title"]["text"].startswith("Memory by category"))
    assert [t["name"] for t in bar["data"]] == ["weights", "gradients", "optimizer", "activations", "other"]
    assert bar["data"][0]["x"] == ["at the out-of-memory error"]
    table = at.dataframe[0].value
    assert table["category"].tolist() == ["weights", "gradients", "optimizer", "activations", "other"]
    assert table["source"][0].startswith("measured at the first optimizer step")
    gib = [float(v.replace(",", "")) if v != "not measured" else None for v in table["GiB"]]
    assert gib[3] == pytest.approx(134.41, abs=0.01) and gib[4] == pytest.approx(3.59, abs=0.01)


def test_memory_timeline_and_zero_what_if(monkeypatch):
    at = open_page(monkeypatch, "memory_page", "gpu_memory_heavy")
    assert titles(at)[-2:] == ["Memory over time", "ZeRO what-if: memory per GPU"]
    table = at.dataframe[-1].value
    assert set(table["stage"]) == {0, 1, 2, 3}
    # Ψ defaults to the run's own weights, the model inferred from the trace: slow_data_ddp.py --dim 4096 is
    # Linear(d, 4d) + Linear(4d, 4d) + Linear(4d, 1) with biases = 20d² + 12d + 1 (not 1e9)
    d = 4096
    psi = 20 * d * d + 12 * d + 1
    assert at.number_input[0].value == psi
    assert "the model inferred from the traces" in texts(at)
    # stage 0 − stage 3 at N_d = 8: 16Ψ − 16Ψ/8 = 14Ψ of model states (activations cancel)
    zero = table[(table["stage"] == 0) & (table["dp"] == 8)]["total (GiB)"].iloc[0]
    s3 = table[(table["stage"] == 3) & (table["dp"] == 8)]["total (GiB)"].iloc[0]
    assert zero > 16 * psi / 2**30 - 0.01 and zero - s3 == pytest.approx(14 * psi / 2**30, abs=0.02)
    assert at.metric[1].value == "140 GiB"


def test_diagnoses_page_sorted_with_evidence_fix_and_range(monkeypatch):
    at = open_page(monkeypatch, "diagnoses_page")
    t = texts(at)
    steps = sorted(analyze_run(TRACES / "ddp_slow_data").breakdown["step"].unique())
    assert "dataloader_stall" in t and "Fix:" in t and f"profiled steps {steps[0]}–{steps[-1]}" in t and "Estimated gain" in t
    ev = at.table[0].value  # a static table: long values wrap; cells shown as written (escaped markdown)
    assert "share_pct" in {unescaped(i) for i in ev.index}
    shown = [line for line in texts(at).split(":red[■]")[1:]]
    ids = [d.id for d in sorted(analyze_run(TRACES / "ddp_slow_data").diagnoses,
                                key=lambda d: d.estimated_gain.get("step_time_saved_pct") or 0, reverse=True)]
    assert all(f"**{i}**" in t for i in ids)
    assert shown  # severities drawn as coloured squares


def test_diagnoses_page_draws_the_most_severe_first(monkeypatch):
    run = "fault_slow_data"  # two diagnoses of different severity and gain
    at = open_page(monkeypatch, "diagnoses_page", run=run)
    t = texts(at)
    ids = [d.id for d in sorted(analyze_run(TRACES / run).diagnoses,
                                key=lambda d: d.estimated_gain.get("step_time_saved_pct") or 0, reverse=True)]
    assert len(ids) >= 2
    assert [t.index(f"**{i}**") for i in ids] == sorted(t.index(f"**{i}**") for i in ids)


def test_runs_page_lists_committed_runs(monkeypatch):
    from workbench.present.shown import shown

    shown(TRACES / "ddp_slow_data")  # analysed (and cached) before: the list shows its verdict at once
    monkeypatch.setattr("workbench.ui.runs.AUTO_ANALYZE_S", 2.0)  # a few runs analysed for the list, not 20 s of them
    at = open_page(monkeypatch, "runs_page", run=None)
    table = at.table[0].value
    table = table.set_axis([unescaped(i) for i in table.index]).map(unescaped)
    assert {"ddp_slow_data", "ddp_fixed_data"} <= set(table.index)
    # the runs the CLI finds in subfolders too, by their path under the root
    assert {"public/hta_a100_80gb", "corpus/hf_trainer_gpu"} <= set(table.index)
    row = table.loc["ddp_slow_data"]
    assert row["status"] == "ok" and row["ranks"] == "2" and row["verdict"].startswith("dataloader_stall")
    start = json.loads((TRACES / "ddp_slow_data" / "manifest.json").read_text())["start_utc"]
    assert row["date"] == start[:16].replace("T", " ")


def test_compare_page_side_by_side(monkeypatch):
    at = open_page(monkeypatch, "compare_page", run=None, a="ddp_slow_data", b="ddp_fixed_data")
    assert titles(at) == ["ddp_slow_data: ms per step", "ddp_fixed_data: ms per step", "B vs A: change per metric (%)"]
    t = texts(at)
    assert "Resolved in B" in t and "`dataloader_stall`" in t.split("Resolved in B")[1].split("New in B")[0]
    metrics = at.dataframe[0].value.set_index("metric")
    # A waits on input for most of the step; B below dataloader_stall's warning level (10 %)
    assert metrics.loc["dataloader_pct", "a"] > 40 and metrics.loc["dataloader_pct", "b"] < 10
    assert at.metric[0].label.startswith("Measured speed-up")


def test_efficiency_page_on_a_gpu_run(monkeypatch):
    at = open_page(monkeypatch, "efficiency_page", "eff_conv_nchw_fp32", root=DATA)
    eff = analyze_run(DATA / "eff_conv_nchw_fp32").efficiency_json()
    m = {x.label: x.value for x in at.metric}
    assert m["MFU"] == f"{eff['mfu_pct']:,.1f}%" and m["MFU vs bf16 peak"] == f"{eff['mfu_bf16_pct']:,.1f}%"
    # a step under a TFLOP in GFLOP (not "0.0" TFLOP)
    unit, scale = ("TFLOP", 1e12) if eff["flops_per_step"] >= 1e12 else ("GFLOP", 1e9)
    per_step, rate = eff["flops_per_step"] / scale, eff["achieved_tflops"] * 1e12 / scale
    assert m[f"{unit} per step"] == f"{per_step:,.{1 if per_step >= 1 else 2}f}"
    assert m[f"{unit}/s achieved"] == f"{rate:,.{1 if rate >= 1 else 2}f}"
    t = texts(at)
    # the dtype mix: cuDNN ran the fp32 convs on tensor cores, but one weight gradient in its
    # non-tensor-core wgrad_alg0_engine<float> (fp32 on CUDA cores)
    assert "tf32 99.2%, fp32 0.8%" in t
    # the run's efficiency diagnoses, with their evidence; not the memory rule
    for rid in ("low_mfu", "layout_conversion", "fp32_matmul", "unfused_elementwise"):
        assert f"**{rid}**" in t
    assert "**memory_fragmentation**" not in t
    assert titles(at) == ["MFU per profiled step", "GPU time per kernel class"]
    mfu, cls = specs(at)
    assert [round(y, 2) for y in _values(mfu["data"][0]["y"])] == [round(r["mfu_pct"], 2) for r in eff["per_step"]]
    bars = cls["data"][0]
    layout = next(i for i, y in enumerate(bars["y"]) if y == "copy · layout")
    assert _values(bars["x"])[layout] > 1  # NCHW↔NHWC conversions: a visible share of GPU time
    assert any("of roofline" in x for x in bars["text"])
    top = next(f.value for f in at.table if unescaped(f.value.index.name) == "kernel")  # a static table: names wrap
    top = top.set_axis([unescaped(c) for c in top.columns], axis=1).map(unescaped)
    assert list(top.columns[:3]) == ["class", "subclass", "dtype"]
    assert pd.to_numeric(top["time_ms"]).is_monotonic_decreasing
    conv = top[top["class"] == "gemm_tensor_core"]
    known = pd.to_numeric(conv["pct_of_peak"].replace("", None)).dropna()  # a conv's helper kernel (FLOPs on its main kernel) has none
    assert len(known) >= len(conv) - 1 and known.between(1, 100).all()
    assert "every GPU kernel of this run fell into a named class" in t


def test_efficiency_page_on_a_bf16_gpt_shows_its_mfu(monkeypatch):
    at = open_page(monkeypatch, "efficiency_page", "eff_gpt_bf16", root=DATA)
    eff = analyze_run(DATA / "eff_gpt_bf16").efficiency_json()
    assert at.metric[0].value == f"{round(eff['mfu_pct'], 1):,.1f}%"
    assert "bf16 100.0%" in texts(at) and "**low_mfu**" in texts(at)
    # MFU (the model's FLOPs, the convention named) beside HFU (what the trace executed)
    m = {x.label: x.value for x in at.metric}
    assert eff["mfu_source"] == "model" and m["HFU"] == f"{eff['hfu_pct']:,.1f}%" and m["HFU"] != m["MFU"]
    assert any("nanogpt: 6·N_active + 6·L·heads·(head_dim + v_head_dim)·seq" in c.value for c in at.caption)
    model = next(f.value for f in at.table if "confidence" in f.value.columns)
    fields = {unescaped(k): unescaped(v) for k, v in zip(model.index, model["value"])}
    assert fields["layers"] == "8" and fields["recompute"] == "none" and "model_flops_per_token" in fields


def test_efficiency_page_on_a_cpu_run_says_it_needs_a_gpu(monkeypatch):
    at = open_page(monkeypatch, "efficiency_page", "ddp_slow_data")
    assert "Efficiency needs a GPU trace" in at.info[0].value and "CPU run" in at.info[0].value
    assert not at.get("plotly_chart") and not at.metric
    flops = analyze_run(TRACES / "ddp_slow_data").efficiency_json()["flops_per_step"]
    assert f"{flops / 1e9:,.2f} GFLOP per step" in texts(at)


def test_efficiency_page_on_a_cpu_moe_run_names_its_convention_and_the_experts_share(monkeypatch):
    at = open_page(monkeypatch, "efficiency_page", "moe_deepseek_v3_cpu")
    eff = analyze_run(TRACES / "moe_deepseek_v3_cpu").efficiency_json()
    conv = next(f.value for f in at.dataframe if "convention" in f.value.columns)
    assert list(conv["convention"]) == ["nanogpt", "torchtitan", "megatron", "palm"]
    assert conv["model FLOPs per token"][0] == f"{eff['mfu_by_convention']['nanogpt']['model_flops_per_token']:,}"
    m = {x.label: x.value for x in at.metric}
    from workbench.format.words import pct  # a share under 1 % keeps two figures: 0.69%, not 0.7%

    assert m["Routing"] == pct(eff["moe"]["routing_pct"]) and m["Dispatch / combine"] == pct(eff["moe"]["dispatch_pct"])
    model = next(f.value for f in at.table if "confidence" in f.value.columns)
    fields = {unescaped(k): unescaped(v) for k, v in zip(model.index, model["value"])}
    assert fields["experts"] == "8" and fields["attention"] == "MLA" and fields["shared_experts"] == "1"


def test_root_forwards_to_overview_with_the_run(app):
    # the root is a hidden page that switches to /overview, keeping ?run=
    app.query_params["run"] = "ddp_fixed_data"
    app.run()
    assert not app.exception
    assert app.title[0].value == "ddp_fixed_data" and app.query_params["run"] == "ddp_fixed_data"


def test_compare_page_opens_on_the_newest_run_and_its_closest_predecessor(monkeypatch, tmp_path):
    """Not on the two newest runs, which may be unrelated (engine_pp_1f1b_m8 vs demo-slow-data)."""
    import shutil

    for name in ("engine_pp_1f1b_m8", "ddp_slow_data"):
        shutil.copytree(TRACES / name, tmp_path / name, ignore=shutil.ignore_patterns(".workbench-cache"))
    demo = tmp_path / "demo-slow-data"  # `make demo`: the slow example again, the newest run
    shutil.copytree(TRACES / "ddp_slow_data", demo, ignore=shutil.ignore_patterns(".workbench-cache"))
    m = json.loads((demo / "manifest.json").read_text())
    m.update(start_utc="2026-12-09T10:00:00+00:00", run_id="demo-slow-data",
             command="workbench profile --nproc-per-node 2 --out traces/demo-slow-data workbench/examples/slow_data_ddp.py --num-workers 0")
    (demo / "manifest.json").write_text(json.dumps(m))
    at = open_page(monkeypatch, "compare_page", run=None, root=tmp_path)
    assert at.query_params["a"] == "ddp_slow_data" and at.query_params["b"] == "demo-slow-data"


def test_plan_page_ranks_layouts_with_memory_and_time_bars(monkeypatch):
    """The Plan page: the article's 175B on 8192 GPUs, the ranked layouts, a memory bar per layout
    and the step-time split, the given layout first."""
    at = open_page(monkeypatch, "plan_page", run=None, gpus="8192", gpu="H100", batch="1536",
                   layout="tp=8,pp=16,dp=64,zero=1,mb=1,recompute=selective,sp=1")
    assert at.dataframe and at.dataframe[0].value["layout"].iloc[0].startswith("tp8 pp16 dp64")  # the charts' short keys
    t = titles(at)
    assert any(x.startswith("Memory per GPU") for x in t) and any(x.startswith("Predicted step time") for x in t)
    mem = next(s for s in specs(at) if s["layout"]["title"]["text"].startswith("Memory per GPU"))
    assert {d["name"] for d in mem["data"]} >= {"weights", "gradients", "optimizer state", "activations"}
    assert "Why the others lost" in texts(at) and "stated default efficiencies" in texts(at)


def test_plan_page_finds_fsdp2_on_one_gpu_and_warns_outside_the_calibration(monkeypatch):
    """Llama-3 8B at sequence 8192 on one H200, torch stack: FSDP2 (ZeRO-3) at dp 1 with full
    recomputation fits at 16 bytes per parameter; calibrated on a 370M run, the 8B head's matmul
    lies outside the measured sizes and the page says so."""
    at = open_page(monkeypatch, "plan_page", run=None, model="llama3-8b", gpus="1", gpu="H200", batch="1")
    at.radio[0].set_value("torch").run()
    assert not at.exception and "No layout fits" not in texts(at)
    assert at.dataframe[0].value["layout"].iloc[0] == "tp1 pp1 dp1 z3 mb1 full"  # tp=1,pp=1,dp=1,zero=3,mb=1,recompute=full,sp=0
    assert not any("outside the calibration" in str(w.value) for w in at.warning)
    at.multiselect[0].set_value(["case_gpu_2_preload_shm"]).run()
    assert not at.exception
    assert any("outside the calibration" in str(w.value) for w in at.warning)


def test_memory_page_of_a_gpu_trace_without_memory_records(monkeypatch):
    """A public A100 trace (no steps CSVs, no memory events): not "host RSS" (the host's is not the
    GPU's), and the ZeRO what-if starts from the parameters every other figure of the run uses."""
    at = open_page(monkeypatch, "memory_page", "hta_a100_80gb", root=TRACES / "public")
    assert at.metric[0].label == "Peak (GPU allocated)" and at.metric[0].value == "—"
    params = analyze_run(TRACES / "public" / "hta_a100_80gb").model_json()["fields"]["params_total"]["value"]
    assert at.number_input[0].value == params
    sources = " ".join(at.dataframe[0].value["source"].astype(str))  # memory by category: not "(CPU)" on a GPU trace
    assert "no allocator peak in the run" in sources and "CPU)" not in sources.replace("a CPU run", "")


def test_a_nested_run_opens_by_its_path_and_an_unknown_one_is_said(monkeypatch):
    at = open_page(monkeypatch, "overview_page", "public/hta_a100_80gb")
    assert at.selectbox(key="run").value == "public/hta_a100_80gb"
    at = open_page(monkeypatch, "overview_page", "no_such_run")
    assert any("No run `no_such_run` under the traces root" in w.value for w in at.warning), [w.value for w in at.warning]


def test_text_from_a_run_is_shown_escaped(monkeypatch, tmp_path):
    """A run whose error and directory name hold terminal escapes: every page shows them as escapes."""
    import shutil

    run = tmp_path / "run\x1b[2Jx"
    shutil.copytree(TRACES / "failed_gloo_timeout", run, ignore=shutil.ignore_patterns(".workbench-cache"))
    m = json.loads((run / "manifest.json").read_text())
    m["error"] = "rank 0: RuntimeError: \x1b]0;title\x07boom\x9b2J"
    (run / "manifest.json").write_text(json.dumps(m))
    for page in ("runs_page", "overview_page", "diagnoses_page"):
        at = open_page(monkeypatch, page, run=None if page == "runs_page" else run.name, root=tmp_path)
        shown = texts(at) + " ".join(str(t.value) for t in at.table) + " ".join(str(o) for o in at.selectbox)
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", shown), (page, shown[:400])
