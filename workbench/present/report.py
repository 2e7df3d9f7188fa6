"""One self-contained HTML file with the app's figures (``workbench report``, workbench.cli.report).

The page works offline: plotly's JavaScript is inlined once (in the first figure), the rest of
the figures reuse it; no external script, style or font is referenced. Figures come from
workbench.present.figures, the numbers from workbench.present.summary, so the report shows what the app shows.
"""

from __future__ import annotations

import html
from datetime import datetime, timezone
from pathlib import Path

from workbench.format.atomic import write_atomic
from workbench.format.errors import WorkbenchError
from workbench.format.printable import printable

_CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1200px;color:#222}
h1{margin-bottom:0}.sub{color:#666;margin-top:4px}.verdict{padding:12px 16px;border-radius:6px;font-weight:600}
.critical{background:#fde2e2}.warning{background:#fff1d6}.ok{background:#e3f6e5}
.kpis{display:flex;gap:24px;flex-wrap:wrap;margin:16px 0}.kpi{min-width:140px}.kpi b{display:block;font-size:1.5em}
.diag{border:1px solid #ddd;border-radius:6px;padding:8px 16px;margin:8px 0}code{background:#f4f4f4;padding:1px 4px}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}"""


DRAWN_RANKS = 4  # ranks whose events (timeline, memory samples) the report draws


def figures_for(analysis) -> list[tuple[str, "go.Figure"]]:
    """(section, figure) pairs: the Overview, Timeline, Utilisation, Communication and Memory views."""
    import pandas as pd  # heavy imports stay out of the CLI's start-up (the parser is built on GPU boxes)

    from workbench.present import figures as F
    from workbench.present.history_report import history_figure
    from workbench.analysis import frames
    from workbench.analysis.memory import memory_timeline

    run = analysis.run
    windows = analysis.per_rank_frames(frames.WINDOWS)
    memory = analysis.context.memory_by_category if analysis.context is not None else None
    by_category = [("Memory", F.memory_categories_bar(memory, (run.device_memory_bytes or 0) / 2**30 or None))] if memory else []
    if not windows:  # the job failed before a trace was written: the samples and memory it left
        nvml = {r: d.nvml for r, d in run.ranks.items() if d.nvml is not None and not d.nvml.empty}
        return ([("Utilisation", F.utilisation(nvml, {r: d.steps for r, d in run.ranks.items()}))] if nvml else []) + by_category
    out = [("Overview", F.step_breakdown_bar(analysis.per_rank)), ("Overview", F.step_time_lines(analysis.breakdown))]
    if (hist := history_figure(analysis)) is not None:  # the whole run, beyond the profiled steps
        out.append(("History", hist))
    # events are drawn for the first few ranks only, each read from its trace (the analysis holds summaries)
    drawn = {r: run.trace(r) for r in sorted(windows)[:DRAWN_RANKS]}
    lanes = pd.concat([F.timeline_lanes(t, windows[r], r) for r, t in drawn.items()], ignore_index=True)
    t0 = min(float(w["start_us"].min()) for w in windows.values())
    out.append(("Timeline", F.timeline(lanes, t0)))
    nvml = {r: d.nvml for r, d in run.ranks.items() if d.nvml is not None and not d.nvml.empty}
    if nvml:
        out.append(("Utilisation", F.utilisation(nvml, {r: d.steps for r, d in run.ranks.items()})))
    inv = pd.concat([f.assign(rank=r) for r, f in analysis.per_rank_frames(frames.INVENTORY).items()], ignore_index=True)
    ov = pd.concat([f.assign(rank=r) for r, f in analysis.per_rank_frames(frames.COMM_OVERLAP).items()], ignore_index=True)
    if not inv.empty:
        out.append(("Communication", F.collective_bytes_bar(inv)))
        out.append(("Communication", F.comm_overlap_bar(ov)))
    samples = []
    for r, t in drawn.items():
        m = memory_timeline(t)
        if not m.empty:
            dev = 1 if (m["device_type"] == 1).any() else int(m["device_type"].iloc[0])
            samples.append(m[m["device_type"] == dev].assign(rank=r))
    if samples:
        cap = run.device_memory_bytes if any((f["device_type"] == 1).any() for f in samples) else None
        out.append(("Memory", F.memory_lines(pd.concat(samples, ignore_index=True), cap, t0)))
    return out + by_category


def _text(value) -> str:
    """Text as the report shows it: HTML-escaped, and a run's control characters shown as escapes."""
    return html.escape(printable(str(value)))


def render(analysed) -> str:
    """The report's HTML text for an analysed run (workbench.pipeline.AnalysedRun): the numbers of
    its result, the figures of its analysis."""
    from workbench.present import summary
    from workbench.present.history_report import history_tables

    result, analysis = analysed.result, analysed.analysis()
    run = analysis.run
    e = _text
    h = summary.headline(result, analysis)
    serious = result.serious()
    level = "ok" if not serious else serious[0].severity

    def kpi(label: str, value: str) -> str:
        return f'<div class="kpi">{e(label)}<b>{e(value)}</b></div>'

    def fmt(v, unit, digits=1):
        return "—" if v is None else f"{v:.{digits}f}{unit}"

    peak = "—" if h.peak_memory_bytes is None else f"{h.peak_memory_bytes / 2**30:.2f} GiB"
    if h.peak_memory_bytes and h.capacity_bytes:
        peak += f" of {h.capacity_bytes / 2**30:.0f} GiB"
    said = result.summary.note or h.capture_line  # the note says the capture's figures when it is printed
    parts = [
        f"<h1>{e(run.name)}</h1>",
        f'<p class="sub">{run.world_size} rank(s) · {e(run.device_name or "unknown device")} · '
        f'status {e(str(run.manifest.get("status", "bare")))} · {e(str(run.manifest.get("start_utc") or ""))} · '
        f'report {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC</p>',
        f'<p class="verdict {level}">Verdict: {e(result.verdict)}</p>',
        '<div class="kpis">' + kpi("Step time", fmt(h.step_ms, " ms"))
        + kpi("GPU busy" if run.has_gpu else "CPU busy (no GPU)", fmt(h.gpu_busy_pct, "%", 0))
        + kpi("MFU", fmt(h.mfu_pct, "%")) + kpi("Exposed comm", fmt(h.exposed_comm_pct, "%", 0))
        + kpi(f"Peak memory ({h.memory_kind})", peak) + "</div>",
        # the CLI's and the app's words: which steps the step time is the mean of, what the capture cost
        (f'<p class="sub">Step time is {e(h.step_words)}.' + (f" {e(said[:1].upper() + said[1:])}." if said else "")
         + "</p>" if h.step_words else ""),
        "<h2>Diagnoses</h2>",
    ]
    for w in run.warnings:
        parts.append(f"<p>⚠ {e(w)}</p>")
    diagnoses = summary.sorted_by_gain(result.diagnoses)
    if not diagnoses:
        parts.append("<p>No bottleneck found.</p>")
    for d in diagnoses:
        gain = d.estimated_gain or {}
        rng = summary.time_range(analysis, d.ranks)
        ev = "".join(f"<tr><th>{e(str(k))}</th><td>{e(summary.evidence_text(v))}</td></tr>" for k, v in d.evidence.items())
        parts.append(
            f'<div class="diag" id="{e(d.id)}"><p><b><code>{e(d.id)}</code></b> · {e(d.severity)} — {e(d.title)}</p>'
            f"<p><b>Fix:</b> {e(d.recommendation)}</p>"
            + (f"<p>Estimated gain: up to {e(str(gain.get('speedup_max')))}× ({e(str(gain.get('formula', '')))}); "
               f"toggles: {e(', '.join(d.fix))}</p>" if gain.get("speedup_max") else "")
            + _alternatives_html(d.alternatives)
            + (f"<p>Where: ranks {e(', '.join(map(str, rng['ranks'])))}, profiled steps {rng['steps'][0]}–{rng['steps'][1]}</p>" if rng else "")
            + f"<table>{ev}</table></div>")
    section = None
    for i, (name, fig) in enumerate(figures_for(analysis)):
        if name != section:
            parts.append(f"<h2>{e(name)}</h2>")
            section = name
        parts.append(fig.to_html(full_html=False, include_plotlyjs="inline" if i == 0 else False,
                                 config={"displaylogo": False}, default_width="100%"))
        if name == "History":
            parts.append(history_tables(result))
    parts.append("<h2>Per rank</h2>" + summary.per_rank_table(analysis).to_html(index=False, border=0))
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>workbench report: {e(run.name)}</title>'
            f"<style>{_CSS}</style></head><body>\n{body}\n</body></html>\n")


def _alternatives_html(alternatives) -> str:
    """The planner's answers to a finding (workbench.calibration.alternatives), as the CLI words them."""
    from workbench.present.shown import alternative_line

    if alternatives is None:
        return ""
    if not alternatives:
        return "<p><b>The planner:</b> no layout it tried on these GPUs serves this better.</p>"
    items = "".join(f"<li>{_text(alternative_line(a))}</li>" for a in alternatives)
    return f"<p><b>The planner, calibrated on this run:</b></p><ul>{items}</ul>"


def write_report(path: Path | str, out: Path | str) -> Path:
    """Analyze the run at ``path`` and write its report to ``out``; returns ``out``."""
    from workbench.present.shown import shown

    out = Path(out)
    if out.suffix.lower() not in (".html", ".htm"):
        raise WorkbenchError(f"{out}: the report is HTML; give a file name ending in .html")
    if out.parent and not out.parent.exists():
        raise WorkbenchError(f"{out.parent}: no such directory")
    text = render(shown(path))
    try:  # whole or not at all: a full disk leaves no truncated report (format.atomic)
        write_atomic(out, text)
    except OSError as err:
        raise WorkbenchError(f"{out}: cannot write ({err.strerror or err}); nothing was written") from None
    return out
