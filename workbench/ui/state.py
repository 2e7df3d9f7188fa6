"""Where runs live, which one is selected, and cached analyses: shared by every page."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import pandas as pd
import streamlit as st

from workbench.analysis.memory import count_params, weight_shapes
from workbench.analysis.steps import step_windows
from workbench.format.errors import WorkbenchError
from workbench.format.kineto import trace_files
from workbench.format.printable import printable, printable_doc
from workbench.present.figures import timeline_lanes
from workbench.load import find_runs
from workbench.pipeline.cache import CACHE_DIR
from workbench.pipeline import AnalysedRun, Options
from workbench.present.shown import shown
from workbench.pipeline.result import Result
from workbench.pipeline.verdict import Analysis

# Verdicts of the runs analysed in this server process, for the Runs page (which never analyses
# a large run just to fill a table cell).
_VERDICTS: dict[tuple[str, float], str] = {}


def traces_root() -> Path:
    """``streamlit run app.py -- --traces DIR``, else $WORKBENCH_TRACES, else ./traces."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--traces", default=None)
    args, _ = p.parse_known_args(sys.argv[1:])
    return Path(args.traces or os.environ.get("WORKBENCH_TRACES") or "traces")


def mtime(path: Path) -> float:
    if not path.is_dir():
        return 0.0
    return max((f.stat().st_mtime for f in path.iterdir() if f.name != CACHE_DIR), default=0.0)


@st.cache_resource(max_entries=8, show_spinner=False)
def _analysed(path: str, mtime: float) -> AnalysedRun:
    # In this process: worker processes of a Streamlit script would import the script again as
    # their __main__ (multiprocessing's spawn/forkserver preparation), i.e. run the app. The
    # caches make a run opened before fast; `workbench analyze RUN` fills them on all cores.
    a = shown(path, Options(workers=1))
    # what every page shows of the run (its verdict, warnings, findings, names) with the run's text
    # escaped: an escape sequence or a carriage return in an error is shown, not acted on
    return dataclasses.replace(a, result=Result.from_json(printable_doc(a.result.to_json())))


def _analysis(path: str, mtime: float) -> Analysis:
    return _analysed(path, mtime).analysis()


def analysed_quietly(path: Path) -> AnalysedRun | str:
    """The run analysed (see :func:`analysed_for`), or what stops its analysis, in one line (a run
    that wrote no trace, a corrupt file): for pages that say it their own way."""
    try:
        with st.spinner(f"Analyzing {printable(path.name, one_line=True)}…"):
            key = (str(path), mtime(path))
            a = _analysed(*key)
            a.analysis()
            _VERDICTS[key] = a.result.verdict
            return a
    except WorkbenchError as e:
        _VERDICTS[(str(path), mtime(path))] = f"not analysed: {printable(str(e), one_line=True)}"
        return printable(str(e), one_line=True)


def analysed_for(path: Path) -> AnalysedRun | None:
    """The run through workbench.pipeline.analyze (the result every command shows, the planner's
    answers included), its analysis (frames) ready; cached until a file in it changes. A run that
    wrote no trace is a run, not an error: a warning says so and what its manifest holds; any
    other reason it cannot be analysed is one error line."""
    a = analysed_quietly(path)
    if not isinstance(a, str):
        return a
    if not trace_files(path):
        st.warning(f"Not analysed: {a}")
        for line in run_facts(path):
            st.caption(line)
    else:
        st.error(a)
    return None


def run_facts(path: Path) -> list[str]:
    """What a run's manifest says of it, for a run with nothing to analyse: its command, status,
    exit code, steps per rank and error."""
    from workbench.load.run import read_manifest

    try:
        m = read_manifest(path)
    except WorkbenchError:
        return []
    ranks = m.get("ranks") if isinstance(m.get("ranks"), dict) else {}
    steps = [r.get("steps") for r in ranks.values() if isinstance(r, dict) and r.get("steps") is not None]
    m = printable_doc(m)
    out = [f"`{m['command']}`" if m.get("command") else "",
           f"status {m.get('status', 'unknown')}, exit code {m.get('exit_code', 'unknown')}"
           + (f", {max(steps)} optimizer step(s) recorded on a rank" if steps else "")]
    if m.get("error"):
        out.append(f"error: {m['error']}")
    if (path / "console.log").exists():
        out.append(f"its output is in `{path / 'console.log'}`")
    return [x for x in out if x]


def known_verdict(path: Path) -> str | None:
    return _VERDICTS.get((str(path), mtime(path)))


def cached_verdict(path: Path) -> str | None:
    """The verdict an earlier analysis cached for the run (``workbench analyze``, the app), read without
    analysing; None when there is none or the run changed since."""
    from workbench.pipeline.cache import cached_result

    try:
        doc = cached_result(path, "alternatives") or cached_result(path)
    except (OSError, WorkbenchError):
        return None
    return doc.get("verdict") if isinstance(doc, dict) else None


@st.cache_resource(max_entries=64, show_spinner=False)
def _windows(path: str, mtime: float, rank: int) -> pd.DataFrame:
    ctx = _analysis(path, mtime).context
    return ctx.windows(rank) if ctx is not None and rank in ctx.ranks else step_windows(_trace(path, mtime, rank))


@st.cache_resource(max_entries=4, show_spinner=False)
def _trace(path: str, mtime: float, rank: int):
    # the analysis holds per-rank summaries; a page that draws events reads one rank's trace
    return _analysis(path, mtime).run.trace(rank)


def trace_for(path: Path, rank: int):
    """One rank's full trace (events, memory samples), read on demand and cached for a few ranks."""
    with st.spinner(f"Reading rank {rank}'s trace…"):
        return _trace(str(path), mtime(path), rank)


def windows_for(path: Path, rank: int) -> pd.DataFrame:
    """analysis.steps.step_windows of one rank, cached with the run."""
    return _windows(str(path), mtime(path), rank)


@st.cache_resource(max_entries=64, show_spinner=False)
def _lanes(path: str, mtime: float, rank: int, lo: float | None, hi: float | None, max_segments: int) -> pd.DataFrame:
    trace = _trace(path, mtime, rank)
    return timeline_lanes(trace, _windows(path, mtime, rank), rank, lo, hi, max_segments)


def lanes_for(path: Path, rank: int, lo: float | None, hi: float | None, max_segments: int) -> pd.DataFrame:
    """figures.timeline_lanes of one rank (downsampled), cached per zoom window."""
    return _lanes(str(path), mtime(path), rank, lo, hi, max_segments)


# Where no count is found at all; the user types the real one.
FALLBACK_PARAMS = 1_000_000_000


@st.cache_resource(max_entries=64, show_spinner=False)
def _params(path: str, mtime: float) -> tuple[int, str]:
    run = _analysis(path, mtime).run
    cfg = run.manifest.get("config") or {}
    stated = run.manifest.get("n_params") or cfg.get("n_params") or (cfg.get("model") or {}).get("n_params")
    if stated:
        return int(stated), "the run's manifest (n_params)"
    # the model the analysis inferred: the count every other figure of the run uses (memory by
    # category, MFU, the planner)
    field = (_analysed(path, mtime).result.model.fields or {}).get("params_total") or {}
    if isinstance(field.get("value"), (int, float)) and field["value"] > 0:
        return int(field["value"]), f"the model inferred from the traces ({field.get('source')})"
    rank = min(run.rank_info)
    trace = _trace(path, mtime, rank)
    n = count_params(trace, _windows(path, mtime, rank))
    if n:
        ops = len(weight_shapes(trace, _windows(path, mtime, rank)))
        return n, (f"counted from rank {rank}'s trace: the weights of the {ops} GEMM/conv ops of its first forward pass "
                   "(embeddings looked up by index and norm scales are not seen, so this can be low)")
    return FALLBACK_PARAMS, "no parameter count in the manifest or the trace (recorded without shapes): 1e9, a placeholder"


def params_for(path: Path) -> tuple[int, str]:
    """(Ψ, where it comes from) of a run: the manifest's n_params, else counted from the trace."""
    return _params(str(path), mtime(path))


def runs() -> list[dict]:
    """Every run under the traces root, each followed by the windows opened while it ran
    (``RUN/windows/<id>``, named ``RUN/windows/<id>``): a window opens in every page as a run does."""
    out = []
    for r in find_runs(traces_root()):
        out.append(r)
        wdir = Path(r["path"]) / "windows"
        if wdir.is_dir():
            for d in sorted((d for d in wdir.iterdir() if d.is_dir()), key=lambda d: (len(d.name), d.name)):
                if trace_files(d):
                    out.append({**r, "name": f"{r['name']}/windows/{d.name}", "path": d, "status": "window",
                                "manifest": {}})
    return out


def selected_run() -> Path | None:
    """The run picked in the sidebar (kept in the URL so a link reopens it)."""
    all_runs = runs()
    if not all_runs:
        st.sidebar.info(f"No runs under {traces_root()}. Make one with `workbench profile train.py`.")
        return None
    names = [r["name"] for r in all_runs]
    wanted = st.query_params.get("run")
    if wanted and wanted not in names and st.session_state.get("run") != wanted:
        # a link to a run that is not under this root: said, not silently replaced by another run
        st.warning(f"No run `{printable(wanted, one_line=True)}` under the traces root `{traces_root()}` "
                   f"({len(names)} run(s) there): showing `{printable(names[0], one_line=True)}`; pick another in the sidebar.")
    index = names.index(wanted) if wanted in names else 0
    name = st.sidebar.selectbox("Run", names, index=index, key="run", format_func=lambda n: printable(n, one_line=True))
    st.query_params["run"] = name
    return next(r["path"] for r in all_runs if r["name"] == name)


def selected() -> tuple[Path | None, AnalysedRun | None]:
    """The sidebar's run and the run analysed (None, None when there is no run): ``.result`` for
    the numbers every command shows, ``.analysis()`` for the frames the figures draw."""
    path = selected_run()
    if path is None:
        return None, None
    return path, analysed_for(path)


def selected_analysis() -> tuple[Path | None, Analysis | None]:
    """The sidebar's run and its analysis (frames; None, None when there is no run)."""
    path, analysed = selected()
    return path, analysed.analysis() if analysed is not None else None
