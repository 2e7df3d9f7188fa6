"""Plan: choose the parallel layout before launch — the inputs of ``workbench plan``, the ranked
layouts, a memory bar per layout and the step-time split; optionally a run against its plan.

Everything shown is ``workbench.plan`` 's ``workbench.plan/1`` document (``workbench plan --json``).
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from workbench.format.errors import WorkbenchError
from workbench.hardware.devices import resolve
from workbench.hardware.peaks import DEVICES
from workbench.present.plan_figures import memory_bars, step_split_bars
from workbench.plan.presets import PRESETS
from workbench.plan.report import to_json
from workbench.calibration.request import build_request
from workbench.plan.search import plan
from workbench.ui import state
from workbench.ui.registry import page


@st.cache_data(max_entries=32, show_spinner=False)
def _plan_doc(model: str, gpus: int, gpu: str, gpus_per_node: int, batch: int, seq: int | None, top: int,
              layout: str | None, stack: str, dtype: str, calibrate: tuple[str, ...]) -> dict:
    req = build_request(model=model, gpus=gpus, gpu=gpu, gpus_per_node=gpus_per_node, global_batch=batch, seq=seq,
                        top=top, layout=layout, stack=stack, dtype=dtype, calibrate=list(calibrate) or None)
    return to_json(plan(req))


def _table(doc: dict) -> pd.DataFrame:
    rows = []
    for p in doc["plans"]:
        m, t = p["memory"], p["time"] or {}
        rows.append({"#": "given" if p["given"] else p["rank"], "layout": p["layout_key"], "fits": p["fits"],
                     "memory (GiB)": m["total_gib"], "step (ms)": t.get("step_ms"), "compute (ms)": t.get("compute_ms"),
                     "TP comm (ms)": t.get("tp_comm_ms"), "EP comm (ms)": t.get("ep_comm_ms"),
                     "bubble (ms)": t.get("bubble_ms"),
                     "exposed DP (ms)": t.get("dp_exposed_ms"), "MFU (%)": 100 * t["mfu"] if t else None,
                     "tokens/s": t.get("tokens_per_s")})
    return pd.DataFrame(rows)


@page("Plan", url_path="plan", section="Before launch", order=10)
def plan_page() -> None:
    st.title("Plan")
    st.caption("Which tensor × pipeline × data-parallel layout (ZeRO stage, micro-batch, recomputation, sequence "
               "parallelism; expert parallelism for a mixture of experts) fits and runs fastest — before launch. The "
               "same search as `workbench plan`; MFU counts a mixture of experts' active parameters (6·N_active + "
               "6·L·heads·(head_dim + v_head_dim)·s per token).")
    presets = list(PRESETS)
    q = st.query_params
    c1, c2, c3, c4 = st.columns(4)
    model = c1.selectbox("Model", presets, index=presets.index(q.get("model", "gpt3-175b")) if q.get("model", "gpt3-175b") in presets else 0)
    keys = c1.text_input("…or a key list", value="", placeholder="L=32,h=4096,a=32,V=50304,s=4096[,experts=64,top_k=6,moe_ffn=1408]")
    gpus_list = list(DEVICES)
    asked = q.get("gpu", "H100")  # a row name, or any name the device table resolves (?gpu=H100)
    row = asked if asked in gpus_list else (resolve(asked).gpu.key if resolve(asked) else None)
    gpu = c2.selectbox("GPU", gpus_list, index=gpus_list.index(row) if row in gpus_list else 0)
    gpus = int(c2.number_input("GPUs", min_value=1, value=int(q.get("gpus", 8192)), step=8))
    per_node = int(c3.number_input("GPUs per node", min_value=1, value=8))
    batch = int(c3.number_input("Global batch (sequences)", min_value=1, value=int(q.get("batch", 1536))))
    seq = int(c4.number_input("Sequence length (0 = the model's)", min_value=0, value=0))
    top = int(c4.number_input("Layouts to show", min_value=1, max_value=50, value=5))
    c5, c6, c7 = st.columns([1, 1, 2])
    stack = c5.radio("Stack", ("megatron", "torch"), horizontal=True,
                     help="megatron: Megatron-LM (fused kernels, vocab-parallel head); torch: the bundled engine / "
                          "plain PyTorch (DDP, FSDP2, DTensor, torch.distributed.pipelining)")
    dtype = c6.radio("dtype", ("bf16", "fp16", "tf32", "fp32"), horizontal=True)
    layout = c7.text_input("Evaluate this layout too", value=q.get("layout", ""),
                           placeholder="tp=8,pp=16,dp=64,zero=1,mb=1,recompute=selective,sp=1")
    runs = [r["name"] for r in state.runs()]
    paths = {r["name"]: str(r["path"]) for r in state.runs()}
    calibrate = st.multiselect("Calibrate on runs (their measured GEMM, attention, memory-bound, host and collective "
                               "rates replace the defaults)", runs, default=[])
    try:
        doc = _plan_doc(keys.strip() or model, gpus, gpu, per_node, batch, seq or None, top, layout.strip() or None,
                        stack, dtype, tuple(paths[n] for n in calibrate))
    except WorkbenchError as e:
        st.error(str(e))
        return
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
                f"{doc['cluster']['gpu']} — {doc['searched']:,} layouts searched, {doc['fitting']:,} fit in "
                f"{doc['cluster']['usable_memory_gib']:.0f} GiB")
    if not doc["plans"]:
        st.warning("No layout fits: more GPUs, a smaller micro-batch or another model.")
    else:
        st.dataframe(_table(doc), hide_index=True, width="stretch")
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
    import json

    st.download_button("Plan (JSON, workbench.plan/1)", data=json.dumps(doc, indent=2), file_name="plan.json",
                       mime="application/json")
