"""Runs: every run under the traces root, and the upload of a trace or a zipped run."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from workbench.ui import uploads
from workbench.format.errors import WorkbenchError
from workbench.format.kineto import trace_files
from workbench.ui import state, widgets
from workbench.ui.registry import page

# Runs whose traces total less than this are analysed to fill the verdict column, for at most
# AUTO_ANALYZE_S seconds a visit; larger ones, and those past the budget, show their verdict once opened
# (an analysis the CLI or the app cached is shown at once), so that a root of a hundred runs lists quickly.
AUTO_ANALYZE_BYTES = 20 << 20
AUTO_ANALYZE_S = 20.0


@page("Runs", url_path="runs", section="Runs", order=10)
def runs_page() -> None:
    st.title("Runs")
    root = state.traces_root()
    st.caption(f"Traces root: `{root}`")
    rows = state.runs()
    if not rows:
        st.info("No runs yet. Profile one: `workbench profile --nproc-per-node 2 train.py`, or upload one below.")
    else:
        # the first visit analyses every small run for its verdict (cached after): say so as it goes
        bar = st.progress(0.0, text=f"Reading the verdicts of {len(rows)} run(s)…")
        table = []
        until = time.monotonic() + AUTO_ANALYZE_S
        for i, r in enumerate(rows):
            table.append(_row(r, analyse=time.monotonic() < until))
            bar.progress((i + 1) / len(rows), text=f"Reading the verdicts of {len(rows)} run(s)… {widgets.as_text(r['name'])}")
        bar.empty()
        # a static table: every verdict whole, wrapped to the window (a grid cuts long text)
        widgets.static_table(pd.DataFrame(table).set_index("run"))
        unanalysed = [t["run"] for t in table if t["verdict"].startswith("not analysed")]
        if unanalysed:
            st.warning(f"{len(unanalysed)} run(s) have nothing to analyse ({', '.join(unanalysed)}): their verdict "
                       "says why; open one in Overview for what its manifest holds.")
        st.caption("Open a run: pick it in the sidebar of any page of the Run section (its command is in Overview).")
    _upload(root)


def _row(r: dict, analyse: bool = True) -> dict:
    verdict = state.known_verdict(r["path"])
    if verdict is None:
        size = sum(f.stat().st_size for f in trace_files(r["path"]))
        if analyse and size < AUTO_ANALYZE_BYTES or state.cached_verdict(r["path"]) is not None:
            a = state.analysed_quietly(r["path"])  # a run that cannot be analysed is a row that says why
            verdict = a.result.verdict if not isinstance(a, str) else f"not analysed: {a}"
        elif size >= AUTO_ANALYZE_BYTES:
            verdict = f"({size / 2**20:.0f} MiB of traces: open it in Overview)"
        else:
            verdict = "(not analysed yet: open it in Overview)"
    hosts = r["manifest"].get("hosts") or []
    return {
        "run": r["name"],
        "status": r["status"],
        "ranks": r["world_size"],
        "hardware": " · ".join(str(x) for x in (r["device"] or "unknown", f"{len(hosts)} host(s)" if hosts else None) if x),
        "date": (r["start"] or "")[:16].replace("T", " "),
        "verdict": verdict,
    }


def _upload(root) -> None:
    st.subheader("Add a run")
    st.caption(f"A `*.pt.trace.json[.gz]` trace, or a `.zip` of a run directory (manifest, traces, CSVs). "
               f"Up to {uploads.MAX_UPLOAD_BYTES >> 20} MiB; files are parsed only as JSON/CSV and stored under the root.")
    with st.form("upload", clear_on_submit=False):
        f = st.file_uploader("Trace or zipped run", type=["json", "gz", "zip"])
        name = st.text_input("Run name", placeholder="my-run")
        submitted = st.form_submit_button("Store")
    if not submitted:
        return
    if f is None or not name:
        st.error("Pick a file and give the run a name.")
        return
    try:
        path = uploads.store_upload(root, name.strip(), f.name, f.getvalue())
    except WorkbenchError as e:
        st.error(f"Upload refused: {e}")
        return
    st.success(f"Stored as `{path}`. Pick **{path.name}** in the sidebar.")
