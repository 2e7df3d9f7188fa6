"""Where runs live, which one is selected, and cached analyses: shared by every page."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import streamlit as st

from workbench.errors import WorkbenchError
from workbench.load import find_runs
from workbench.verdict import Analysis, analyze_run


def traces_root() -> Path:
    """``streamlit run app.py -- --traces DIR``, else $WORKBENCH_TRACES, else ./traces."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--traces", default=None)
    args, _ = p.parse_known_args(sys.argv[1:])
    return Path(args.traces or os.environ.get("WORKBENCH_TRACES") or "traces")


def _mtime(path: Path) -> float:
    return max((f.stat().st_mtime for f in path.iterdir()), default=0.0) if path.is_dir() else 0.0


@st.cache_resource(max_entries=8, show_spinner=False)
def _analysis(path: str, mtime: float) -> Analysis:
    return analyze_run(path)


def analysis_for(path: Path) -> Analysis | None:
    """The analysis of one run, cached until a file in it changes; shows errors as one line."""
    try:
        with st.spinner(f"Analyzing {path.name}…"):
            return _analysis(str(path), _mtime(path))
    except WorkbenchError as e:
        st.error(str(e))
        return None


def runs() -> list[dict]:
    return find_runs(traces_root())


def selected_run() -> Path | None:
    """The run picked in the sidebar (kept in the URL so a link reopens it)."""
    all_runs = runs()
    if not all_runs:
        st.sidebar.info(f"No runs under {traces_root()}. Make one with `workbench profile train.py`.")
        return None
    names = [r["name"] for r in all_runs]
    wanted = st.query_params.get("run")
    index = names.index(wanted) if wanted in names else 0
    name = st.sidebar.selectbox("Run", names, index=index, key="run")
    st.query_params["run"] = name
    return next(r["path"] for r in all_runs if r["name"] == name)
