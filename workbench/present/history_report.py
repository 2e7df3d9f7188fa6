"""The report's History section (workbench.present.report): the whole run's step time with its change
points and windows (present.history_figures), and their tables, as the app's History page shows them."""

from __future__ import annotations

import html


def history_figure(analysis):
    """The History figure of an analysis (workbench.pipeline.verdict.Analysis), or None without a history."""
    from workbench.analysis.history import series
    from workbench.present.history_figures import step_history

    ctx = analysis.context
    h = ctx.history if ctx is not None else None
    if not h:
        return None
    df = series({r: d.history for r, d in analysis.run.ranks.items() if d.history is not None})
    return step_history(df, h["change_points"], analysis.windows, ctx.hang)


def history_tables(result) -> str:
    """The change points and the windows of a result (workbench.pipeline.result.Result), as HTML tables."""
    e = html.escape
    h, out = result.history, []
    if h and h.get("change_points"):
        rows = "".join(f"<tr><td>{c['step']:,}</td><td>{c['before_ms']}</td><td>{c['after_ms']}</td><td>{c['change_pct']:+}</td>"
                       f"<td>{e(', '.join(map(str, c['ranks'])))}</td><td>{e(c['cause']['kind'])}</td>"
                       f"<td>{e(', '.join(map(str, c['cause']['ranks'])))}</td></tr>" for c in h["change_points"])
        out.append("<h3>Change points</h3><table><tr><th>step</th><th>before (ms)</th><th>after (ms)</th><th>change (%)</th>"
                   f"<th>ranks</th><th>cause</th><th>on ranks</th></tr>{rows}</table><p class=\"sub\">{e(h['method'])}</p>")
    if result.windows:
        rows = []
        for w in result.windows:
            spans = [(v.get("first_step"), v.get("last_step")) for v in (w.get("ranks") or {}).values()]
            first = min((a for a, _ in spans if a is not None), default=None)
            last = max((b for _, b in spans if b is not None), default=None)
            vs = (w.get("vs_launch") or {}).get("step_ms") or {}
            rows.append(f"<tr><td>{e(w['id'])}</td><td>{e(str(w.get('trigger')))}</td><td>{first}–{last}</td>"
                        f"<td>{e(str(w.get('status')))}</td><td>{(w.get('summary') or {}).get('trace_step_ms', '—')}</td>"
                        f"<td>{vs.get('change_pct', '—')}</td><td>{e(str((w.get('summary') or {}).get('verdict') or ''))}</td></tr>")
        out.append("<h3>Windows</h3><table><tr><th>window</th><th>trigger</th><th>steps</th><th>status</th>"
                   "<th>step (ms)</th><th>vs launch (%)</th><th>verdict</th></tr>" + "".join(rows) + "</table>")
    return "\n".join(out)
