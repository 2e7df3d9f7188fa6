"""Utilisation, Communication and Memory: the device, network and memory views of one run."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from workbench.analysis import frames
from workbench.analysis.exposed import COLUMNS as COMM_COLUMNS, per_step
from workbench.analysis.memory import memory_timeline, step_floors, zero_model_states_bytes
from workbench.present.figures import (collective_bytes_bar, comm_overlap_bar, memory_categories_bar, memory_lines,
                                       utilisation, zero_what_if)
from workbench.ui import state, widgets
from workbench.present import summary
from workbench.present.tables import memory_unit, rounded
from workbench.ui.registry import page

GIB = 2**30


@page("Utilisation", url_path="utilisation", section="Run", order=30)
def utilisation_page() -> None:
    path, analysis = state.selected_analysis()
    st.title("Utilisation")
    if analysis is None:
        return
    nvml = {r: d.nvml for r, d in analysis.run.ranks.items() if d.nvml is not None and not d.nvml.empty}
    if not nvml:
        st.info("This run has no device samples (nvml_rank*.csv): it was not captured by `workbench profile`.")
        return
    steps = {r: d.steps for r, d in analysis.run.ranks.items()}
    st.plotly_chart(utilisation(nvml, steps), width="stretch")
    # one row per rank and quantity: as many columns at 1 rank as at 1,000
    rows = []
    for r, f in sorted(nvml.items()):
        for c in ("gpu_util_pct", "mem_used_bytes", "power_w", "sm_clock_mhz", "cpu_util_pct", "proc_cpu_pct", "rss_bytes"):
            v = pd.to_numeric(f[c], errors="coerce") if c in f else pd.Series(dtype=float)
            if v.notna().any():
                scale = 1 / GIB if c.endswith("_bytes") else 1
                rows.append({"rank": r, "quantity": UTILISATION_NAMES[c], "mean": float(v.mean()) * scale,
                             "max": float(v.max()) * scale, "samples": int(v.notna().sum()), "source": str(f["source"].iloc[0])})
    table = pd.DataFrame(rows)
    for c in ("mean", "max"):  # GiB to 0.01, the rest (%, W, MHz) to 0.1
        table[c] = [round(v, 2 if "GiB" in q else 1) for v, q in zip(table[c], table["quantity"])]
    st.dataframe(table, hide_index=True, width="stretch")


UTILISATION_NAMES = {"gpu_util_pct": "GPU utilisation (%)", "mem_used_bytes": "GPU memory used (GiB)", "power_w": "power (W)",
                     "sm_clock_mhz": "SM clock (MHz)", "cpu_util_pct": "machine CPU (%)",
                     "proc_cpu_pct": "rank process CPU (%, 100 = 1 core)", "rss_bytes": "resident memory (GiB)"}


MEMORY_RANKS = 8  # ranks whose memory samples the Memory page draws (each one's trace is read)


@page("Communication", url_path="communication", section="Run", order=40)
def communication_page() -> None:
    path, analysis = state.selected_analysis()
    st.title("Communication")
    if analysis is None or widgets.no_trace(analysis):
        return
    # per-rank frames of the analysis (computed next to each trace)
    inv = pd.concat([f.assign(rank=r) for r, f in analysis.per_rank_frames(frames.INVENTORY).items()], ignore_index=True)
    ov = pd.concat([f.assign(rank=r) for r, f in analysis.per_rank_frames(frames.COMM_OVERLAP).items()], ignore_index=True)
    if inv.empty:
        st.info("No collectives in this run's traces (a single process, or communication outside the profiled steps).")
    else:
        st.subheader("Collective inventory")
        st.plotly_chart(collective_bytes_bar(inv), width="stretch")
        st.dataframe(rounded(inv), hide_index=True, width="stretch")
    if not ov.empty:
        st.subheader("Overlap with compute, per rank")
        # the figures `workbench analyze` states (workbench.analysis.exposed): the exposed part is the step
        # breakdown's communication, the hidden part the overlap under compute, communication their sum
        tb = analysis.trace_breakdown if analysis.trace_breakdown is not None else analysis.breakdown
        st.plotly_chart(comm_overlap_bar(per_step(tb, ov)), width="stretch")
        per_rank = pd.DataFrame(list(analysis.communication().values()), columns=COMM_COLUMNS)
        st.caption("Mean per step of the job (as `workbench analyze` states it; the bars above are the profiled steps "
                   "themselves); exposed_pct is the exposed share of the step.")
        st.dataframe(rounded(per_rank), hide_index=True, width="stretch")


@page("Memory", url_path="memory", section="Run", order=50)
def memory_page() -> None:
    path, analysis = state.selected_analysis()
    st.title("Memory")
    if analysis is None:
        return
    run = analysis.run
    peaks, kind = summary.peak_memory(analysis)
    cap = run.device_memory_bytes if kind == "GPU allocated" else None
    cols = st.columns(3)
    peak = max(peaks.values()) if peaks else None
    cols[0].metric(f"Peak ({kind})", "—" if peak is None else f"{peak / GIB:.2f} GiB")
    cols[1].metric("Capacity", "—" if not cap else f"{cap / GIB:.0f} GiB")
    cols[2].metric("Peak / capacity", "—" if not (peak and cap) else f"{100 * peak / cap:.1f}%")
    shown_run = state.analysed_for(path)  # the same result the CLI prints (the planner's split included)
    by_category = shown_run.result.memory if shown_run is not None else None
    if by_category:
        st.subheader("By category")
        gpu_cap = run.device_memory_bytes
        st.plotly_chart(memory_categories_bar(by_category, gpu_cap / GIB if gpu_cap else None), width="stretch")
        cats = by_category["by_category"]

        def size_of(v: dict) -> float | None:  # the bytes the run knows, not its GiB rounded to 0.001
            return v.get("bytes") if v.get("bytes") is not None else (v["gib"] * GIB if v.get("gib") is not None else None)

        unit, size = memory_unit([size_of(v) or 0 for v in cats.values()])
        st.dataframe(pd.DataFrame([{"category": k, unit: "not measured" if size_of(v) is None else f"{size_of(v) / size:,.2f}",
                                    "source": v.get("source")} for k, v in cats.items()]), hide_index=True, width="stretch")
        if by_category.get("note"):
            st.caption(by_category["note"])
    if widgets.no_trace(analysis):  # the categories above come from the run's records; the rest is the trace's
        return
    frames, t0, act = [], None, 0
    ranks = sorted(run.rank_info)
    if len(ranks) > MEMORY_RANKS:
        st.caption(f"Memory over time of the first {MEMORY_RANKS} of {len(ranks)} ranks (each is read from its trace); "
                   "the peaks above cover every rank.")
    for r in ranks[:MEMORY_RANKS]:
        trace = state.trace_for(path, r)
        w = state.windows_for(path, r)
        t0 = float(w["start_us"].min()) if t0 is None else min(t0, float(w["start_us"].min()))
        m = memory_timeline(trace)
        if not m.empty:
            dev = 1 if (m["device_type"] == 1).any() else int(m["device_type"].iloc[0])
            m = m[m["device_type"] == dev]
            frames.append(m.assign(rank=r))
            floors = step_floors(m, w)  # CUDA samples: per step lowest and highest allocated
            rise = (floors["max_allocated_bytes"] - floors["min_allocated_bytes"]).max() if not floors.empty else None
            act = max(act, int(rise) if rise is not None else summary.activations_bytes(m, w))
    if frames:
        st.plotly_chart(memory_lines(pd.concat(frames, ignore_index=True), cap, t0 or 0.0), width="stretch")
    else:
        st.info("No memory events in the traces (`workbench profile --profile-memory` records them, for the timeline "
                "inside a step); the peaks above are the allocator's own, from the steps CSVs.")

    st.subheader("ZeRO what-if")
    st.caption("Model states per GPU from the ZeRO paper (mixed-precision Adam, Ψ parameters, N_d data-parallel ranks): "
               "stage 0: 16Ψ · stage 1: 4Ψ + 12Ψ/N_d · stage 2: 2Ψ + 14Ψ/N_d · stage 3: 16Ψ/N_d; plus the activations "
               "measured in this run (largest rise of allocated memory within a step). Temporaries and fragmentation not included.")
    default_params, source = state.params_for(path)
    c1, c2, c3 = st.columns(3)
    n_params = int(c1.number_input("Parameters (Ψ)", min_value=1, value=default_params, step=1_000_000, format="%d",
                                   key=f"psi_{path.name}"))  # keyed per run: another run's Ψ must not carry over
    st.caption(f"Ψ default: {source}.")
    dps = c2.multiselect("Data-parallel sizes (N_d)", [1, 2, 4, 8, 16, 32, 64, 128], default=sorted({1, run.world_size, 8, 64}))
    act_gib = c3.number_input("Activations per GPU (GiB)", min_value=0.0, value=round(act / GIB, 3), step=0.5)
    if not dps:
        return
    table = summary.model_states_table(n_params, dps=sorted(dps), activations_bytes=int(act_gib * GIB), states_fn=zero_model_states_bytes)
    st.plotly_chart(zero_what_if(table, cap), width="stretch")
    unit, size = memory_unit(table["total_bytes"])  # a small model's 0.003 GiB is 3 MiB, not "0"
    total = f"total ({unit})"
    shown = table.assign(**{total: (table["total_bytes"] / size).round(2),
                            "fits": ["yes" if not cap or t <= cap else "no" for t in table["total_bytes"]]})
    st.dataframe(shown[["stage", "dp", total, "fits"]], hide_index=True, width="stretch")
