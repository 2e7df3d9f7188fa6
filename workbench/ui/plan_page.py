"""Plan: choose the parallel layout before launch — the inputs of ``workbench plan``, the ranked
layouts, a memory bar per layout and the step-time split; optionally a run against its plan.

Everything shown is ``workbench.plan`` 's ``workbench.plan/1`` document (``workbench plan --json``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import streamlit as st

from workbench.format.printable import printable

from workbench.format.errors import WorkbenchError
from workbench.hardware.devices import resolve
from workbench.hardware.peaks import DEVICES
from workbench.present.plan_figures import memory_bars, step_split_bars
from workbench.plan.presets import PRESETS
from workbench.plan.report import short_key, to_json
from workbench.present.tables import rounded
from workbench.calibration.from_run import from_run_json, run_job
from workbench.calibration.request import build_request
from workbench.plan.search import plan
from workbench.ui import state
from workbench.ui.registry import page


@st.cache_data(max_entries=32, show_spinner=False)
def _plan_doc(model: str | None, gpus: int, gpu: str, gpus_per_node: int, batch: int, seq: int | None, top: int,
              layout: str | None, stack: str | None, dtype: str, calibrate: tuple[str, ...], from_run: str | None = None) -> dict:
    req = build_request(model=model, gpus=gpus, gpu=gpu, gpus_per_node=gpus_per_node, global_batch=batch, seq=seq,
                        top=top, layout=layout, stack=stack, dtype=dtype, calibrate=list(calibrate) or None,
                        from_run=from_run)
    result = plan(req)
    doc = to_json(result)
    if req.from_run is not None:  # `workbench plan --from-run`: the run against its own plan
        doc["from_run"] = from_run_json(req, result)
    return doc


@st.cache_data(max_entries=32, show_spinner=False)
def _run_defaults(path: str, mtime: float) -> dict:
    """What ``plan --from-run`` takes from a run before any flag: its GPUs, GPU, global batch and layout."""
    job = run_job(path)
    return {"gpus": int(job.gpus), "gpu": job.device_name, "batch": int(job.global_batch), "device": job.device,
            "layout": job.layout.key(), "model": job.model.name if hasattr(job.model, "name") else None}


def _table(doc: dict) -> pd.DataFrame:
    """The ranked layouts: memory, step, MFU and tokens/s (the step's split is the chart below it and
    the JSON's), the layout in its short form, rounded (present.tables)."""
    rows = []
    for p in doc["plans"]:
        m, t = p["memory"], p["time"] or {}
        rows.append({"#": "given" if p["given"] else str(p["rank"]), "layout": short_key(p["layout"]), "fits": p["fits"],
                     "memory (GiB)": m["total_gib"], "step (ms)": t.get("step_ms"),
                     "MFU (%)": 100 * t["mfu"] if t else None, "tokens/s": t.get("tokens_per_s")})
    return rounded(pd.DataFrame(rows))


def _from_run(fr: dict) -> None:
    """The run against the plan of its own layout (``plan --from-run``'s ``from_run`` block)."""
    meas, pred, err = fr.get("measured") or {}, fr.get("predicted") or {}, fr.get("error_pct") or {}
    st.subheader(f"{printable(fr['name'], one_line=True)} against its plan")
    c = st.columns(2)
    for col, (label, m, p, e, unit) in zip(c, (("Step", meas.get("step_ms"), pred.get("step_ms"), err.get("step"), "ms"),
                                               ("Memory per GPU", meas.get("peak_memory_gib"), pred.get("memory_gib"),
                                                err.get("memory"), "GiB"))):
        digits = 1 if unit == "ms" else 2
        col.metric(f"{label}: predicted", "—" if p is None else f"{p:,.{digits}f} {unit}",
                   delta=None if e is None else f"{e:+.1f}% vs measured {m:,.{digits}f} {unit}", delta_color="off",
                   help="measured: the job's step (`workbench analyze`'s step_ms) and the allocator's peak")
    bits = [f"layout {pred['layout_key']}" if pred.get("layout_key") else "", fr.get("note") or "",
            f"the model from {fr.get('source')}"]
    st.caption(" · ".join(b for b in bits if b))
    for a in fr.get("assumed") or []:
        st.caption(f"Assumed: {a}")


@page("Plan", url_path="plan", section="Before launch", order=10)
def plan_page() -> None:
    st.title("Plan")
    st.caption("Which tensor × pipeline × data-parallel layout (ZeRO stage, micro-batch, recomputation, sequence "
               "parallelism; expert parallelism for a mixture of experts) fits and runs fastest — before launch. The "
               "same search as `workbench plan`; MFU counts a mixture of experts' active parameters (6·N_active + "
               "6·L·heads·(head_dim + v_head_dim)·s per token).")
    presets = list(PRESETS)
    q = st.query_params
    all_runs = state.runs()
    runs = [r["name"] for r in all_runs]
    paths = {r["name"]: str(r["path"]) for r in all_runs}
    # ?run=NAME (every page's link carries it): `workbench plan --from-run RUN`, the run's own model,
    # GPUs, batch and layout, unless a widget below asks otherwise
    NONE = "none: plan a model"
    asked = q.get("run")
    source = st.selectbox("Plan from a run (`workbench plan --from-run`)", [NONE, *runs],
                          index=runs.index(asked) + 1 if asked in runs else 0, format_func=lambda n: printable(n, one_line=True),
                          help="the model its traces show (or an engine run's config), on its GPUs, its global batch "
                               "and its layout, predicted beside what it measured")
    run_path = paths.get(source)
    defaults: dict = {}
    if run_path is not None:
        q["run"] = source
        try:
            defaults = _run_defaults(run_path, state.mtime(Path(run_path)))
        except WorkbenchError as e:
            st.warning(f"{printable(source, one_line=True)} cannot be planned from: {printable(str(e), one_line=True)}")
            run_path = None
    c1, c2, c3, c4 = st.columns(4)
    RUN_MODEL = "the run's model"
    models = ([RUN_MODEL] if run_path else []) + presets
    wanted = q.get("model", RUN_MODEL if run_path else "gpt3-175b")
    model = c1.selectbox("Model", models, index=models.index(wanted) if wanted in models else 0)
    keys = c1.text_input("…or a key list", value="", placeholder="L=32,h=4096,a=32,V=50304,s=4096[,experts=64,top_k=6,moe_ffn=1408]")
    gpus_list = list(DEVICES)
    asked_gpu = q.get("gpu") or defaults.get("gpu") or "H100"  # a row name, or any name the device table resolves
    row = asked_gpu if asked_gpu in gpus_list else (resolve(asked_gpu).gpu.key if resolve(asked_gpu) else None)
    gpu = c2.selectbox("GPU", gpus_list, index=gpus_list.index(row) if row in gpus_list else 0,
                       help="the run ran on CPU: its model on the GPU picked here" if defaults.get("device") == "cpu" else None)
    gpus = int(c2.number_input("GPUs", min_value=1, value=int(q.get("gpus", defaults.get("gpus", 8192))), step=8))
    per_node = int(c3.number_input("GPUs per node", min_value=1, value=min(8, gpus) if run_path else 8))
    batch = int(c3.number_input("Global batch (sequences)", min_value=1, value=int(q.get("batch", defaults.get("batch", 1536)))))
    seq = int(c4.number_input("Sequence length", min_value=0, value=0, help="0: the model's own"))
    top = int(c4.number_input("Layouts to show", min_value=1, max_value=50, value=5))
    c5, c6, c7 = st.columns([1, 1, 2])
    stack = c5.radio("Stack", ("megatron", "torch"), horizontal=True, index=1 if run_path else 0,
                     help="megatron: Megatron-LM (fused kernels, vocab-parallel head); torch: the bundled engine / "
                          "plain PyTorch (DDP, FSDP2, DTensor, torch.distributed.pipelining)")
    dtype = c6.radio("dtype", ("bf16", "fp16", "tf32", "fp32"), horizontal=True)
    layout = c7.text_input("Evaluate this layout too", value=q.get("layout", ""),
                           placeholder=defaults.get("layout") or "tp=8,pp=16,dp=64,zero=1,mb=1,recompute=selective,sp=1",
                           help="empty with a run: the run's own layout")
    calibrate = st.multiselect("Calibrate on runs (their measured GEMM, attention, memory-bound, host and collective "
                               "rates replace the defaults)", runs, default=[])
    chosen = keys.strip() or (None if model == RUN_MODEL else model)
    try:
        doc = _plan_doc(chosen, gpus, gpu, per_node, batch, seq or None, top, layout.strip() or None,
                        stack, dtype, tuple(paths[n] for n in calibrate), run_path)
    except WorkbenchError as e:
        st.error(str(e))
        return
    if doc.get("from_run"):
        _from_run(doc["from_run"])
    e = doc["efficiencies"]
    if e["source"] == "defaults":
        st.info(f"Datasheet peaks × stated default efficiencies (GEMM {e['gemm']:.0%}, attention {e['attention']:.0%}, "
                f"memory-bound {e['memory_bound']:.0%} of HBM): pick runs above to calibrate on your own.")
    else:
        st.success("Calibrated on " + ", ".join(e["runs"]) + ": " + "; ".join(e["notes"]))
    for w in e.get("warnings") or []:
        st.warning(w)
    m = doc["model"]
    st.markdown(f"**{m['name']}**: {m['params'] / 1e9:,.2f}B parameters on {doc['cluster']['gpus']:,} × "
                f"{doc['cluster']['gpu']} — {doc['searched']:,} layouts searched, {doc['fitting']:,} fit in the "
                f"{doc['cluster']['usable_memory_gib']:.2f} GiB usable")
    if not doc["plans"]:
        st.warning("No layout fits: more GPUs, a smaller micro-batch or another model.")
    else:
        st.dataframe(_table(doc), hide_index=True, width="stretch")
        st.caption("Layouts in short form (tp8 pp16 dp64 z1 mb1 sel sp: ZeRO-1, micro-batch 1, selective "
                   "recomputation, sequence parallel); the JSON below has each one's full key for `--layout`.")
        st.plotly_chart(memory_bars(doc), width="stretch")
        if any(p["time"] for p in doc["plans"]):
            st.plotly_chart(step_split_bars(doc), width="stretch")
        first = doc["plans"][0]
        with st.expander(f"Memory formulas of {first['layout_key']}"):
            for k, f in first["memory"]["formulas"].items():
                st.markdown(f"- **{k}**: {f}")
    if doc["rejected"]:
        st.subheader("Why the others lost")
        for x in doc["rejected"]:
            st.markdown(f"- **{x['reason']}** ({x['count']:,}): e.g. `{x['example']}` — {x['detail']}")
    st.download_button("Plan (JSON, workbench.plan/1)", data=json.dumps(doc, indent=2), file_name="plan.json",
                       mime="application/json")
