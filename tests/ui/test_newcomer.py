"""What a newcomer meets in a 1280×800 window, checked in the DOM of a real Chromium (the session's
server and browser: tests/ui/conftest.py): nothing cut off, no number with four decimals, no legend
over an axis title, the Plan page on the linked run's model, a run without a trace a warning and
not an error, no "+0 ms" reason. One page load per check.

Cut off means an element that clips (overflow hidden/auto/scroll, or an ellipsis) whose content is
wider than it: a grid that scrolls sideways, a metric cut to "25.43 G…". Grid cells are drawn on a
canvas, so a long value (a diagnosis' source) is checked as text shown whole in a visible element.
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import TRACES
from workbench.pipeline.verdict import analyze_run

pytestmark = [pytest.mark.browser, pytest.mark.live, pytest.mark.slow]

CLIPPED = """() => {
  const main = document.querySelector('[data-testid="stMain"]');
  const out = [];
  for (const e of main.querySelectorAll('*')) {
    if (e.closest('svg') || e.closest('.js-plotly-plot')) continue;
    const r = e.getBoundingClientRect();
    if (!r.width || !r.height || e.clientWidth <= 2) continue;  // hidden inputs of radio buttons
    const cs = getComputedStyle(e);
    const clips = ['hidden', 'auto', 'scroll', 'clip'].includes(cs.overflowX) || cs.textOverflow === 'ellipsis';
    if (clips && e.scrollWidth > e.clientWidth + 1)
      out.push(`${e.closest('[data-testid]')?.getAttribute('data-testid')}: ${e.scrollWidth} > ${e.clientWidth} px `
               + `"${(e.innerText || '').slice(0, 40)}"`);
  }
  return out;
}"""

MAIN_TEXT = """() => {
  // the page's text, the charts' axes apart (plotly picks its own ticks: 0.0005 GiB is a tick)
  const charts = Array.from(document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot'));
  charts.forEach(c => c.style.display = 'none');
  const text = document.querySelector('[data-testid="stMain"]').innerText;
  charts.forEach(c => c.style.display = '');
  return text;
}"""
GRID_TEXT = """e => Array.from(e.querySelectorAll('table td, table th')).map(c => c.textContent).join('\\n')"""


def shown_text(window) -> str:
    """The main column's text and every grid's cells (their accessible table, which a grid fills
    with the rows in view: each grid is brought into view first)."""
    parts = [window.evaluate(MAIN_TEXT)]
    grids = window.locator('[data-testid="stMain"] [data-testid="stDataFrame"]')
    for i in range(grids.count()):
        grids.nth(i).scroll_into_view_if_needed()
        window.wait_for_timeout(300)
        parts.append(grids.nth(i).evaluate(GRID_TEXT))
    return "\n".join(parts)


LEGEND_OVERLAPS = """() => {
  const box = e => { const r = e.getBoundingClientRect(); return r.width && r.height ? r : null; };
  const hit = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
  const out = [];
  for (const gd of document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot')) {
    const legend = gd.querySelector('.legend');
    const lb = legend && box(legend.querySelector('.bg') || legend);
    if (!lb) continue;
    for (const t of gd.querySelectorAll('.g-xtitle, .g-ytitle, .g-x2title, .g-y2title, .gtitle')) {
      const tb = box(t);
      if (tb && hit(lb, tb))
        out.push(`${gd.querySelector('.gtitle')?.textContent}: legend over "${t.textContent}"`);
    }
  }
  return out;
}"""

DECIMALS = re.compile(r"(?<![\w.])-?\d+\.\d{4,}(?![\w])")


SETTLED = """() => {
  // the script has run (not only connected: the state reads notRunning before the first run too),
  // its title is drawn and every chart has its SVG
  const app = document.querySelector('[data-testid="stApp"]');
  return app && app.getAttribute('data-test-script-state') === 'notRunning'
    && document.querySelector('[data-testid="stMain"] h1')
    && Array.from(document.querySelectorAll('[data-testid="stPlotlyChart"]')).every(c => c.querySelector('.main-svg'));
}"""


def load(window, url: str) -> None:
    """Open ``url`` and wait until the script has run and the page stopped changing."""
    window.goto(url)
    window.wait_for_function(SETTLED)
    size = -1
    for _ in range(60):  # the page is drawn when two looks 0.7 s apart find the same elements
        window.wait_for_timeout(700)
        now = window.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').getElementsByTagName('*').length")
        if now == size and window.evaluate(SETTLED):
            break
        size = now
    assert not window.locator('[data-testid="stException"]').count(), url


@pytest.mark.parametrize("run", ["ddp_slow_data", "gpu_fsdp2_370m"])
def test_overview_shows_every_column_and_metric_whole(server, window, run):
    # the per-rank table scrolled sideways (16 columns in 818 px); "Peak memory (GPU allocated)"
    # and "25.43 GiB / 140" were cut to an ellipsis
    load(window, f"{server}/overview?run={run}")
    window.locator('[data-testid="stDataFrame"]').last.scroll_into_view_if_needed()
    assert window.evaluate(CLIPPED) == []
    step = analyze_run(TRACES / run).result().summary.step_ms
    assert window.locator('[data-testid="stMetricValue"]').first.inner_text() == f"{step:.1f} ms"


def test_diagnoses_evidence_source_is_shown_whole(server, window):
    d = next(d for d in analyze_run(TRACES / "ddp_slow_data").result().diagnoses if d.id == "dataloader_stall")
    source = d.evidence["source"]
    load(window, f"{server}/diagnoses?run=ddp_slow_data")
    # a visible element holds the whole source (a grid drew it on a canvas, cut at the column's edge)
    shown = window.get_by_text(source, exact=True)
    assert shown.count() >= 1 and shown.first.is_visible()
    assert shown.first.evaluate("e => e.scrollWidth <= e.clientWidth + 1")
    assert window.evaluate(CLIPPED) == []


def test_plan_opens_on_the_linked_runs_model(server, window):
    # /plan?run=NAME is `workbench plan --from-run NAME`: its model, GPUs and layout, against what it measured
    load(window, f"{server}/plan?run=gpu_fsdp2_370m")
    text = window.locator('[data-testid="stMain"]').inner_text()
    assert "gpu_fsdp2_370m against its plan" in text
    assert "gpt3-175b" not in text and "1 × NVIDIA H200" in text
    measured = analyze_run(TRACES / "gpu_fsdp2_370m").result().summary.step_ms
    assert f"vs measured {measured:,.1f} ms" in text  # the run's own step, the job's
    assert window.evaluate(CLIPPED) == []


def test_plan_of_a_model_states_no_false_reason(server, window):
    load(window, f"{server}/plan")  # gpt3-175b on 8192 H100s: GPipe ties 1F1B
    text = window.locator('[data-testid="stMain"]').inner_text()
    assert "+0 ms" not in text and "as fast, more memory" in text
    assert DECIMALS.findall(shown_text(window)) == []
    assert window.evaluate(LEGEND_OVERLAPS) == []
    assert window.evaluate(CLIPPED) == []


@pytest.mark.parametrize("path", ["communication?run=engine_moe_skewed", "compare?a=ddp_slow_data&b=ddp_fixed_data",
                                  "utilisation?run=gpu_fsdp2_370m"])
def test_no_value_with_four_decimals(server, window, path):
    # total_ms 25.598378, calls_per_step 1.3333333333333333, compare's 10.638600000000004
    load(window, f"{server}/{path}")
    assert DECIMALS.findall(shown_text(window)) == []
    assert window.evaluate(CLIPPED) == []


@pytest.mark.parametrize("path", ["timeline?run=engine_moe_skewed", "compare?a=ddp_slow_data&b=ddp_fixed_data",
                                  "overview?run=hf_qwen3_moe_cpu"])
def test_legends_stay_clear_of_axis_titles(server, window, path):
    load(window, f"{server}/{path}")
    assert window.locator('[data-testid="stPlotlyChart"]').count() >= 1
    assert window.evaluate(LEGEND_OVERLAPS) == []


def test_runs_page_lists_a_run_without_trace_as_a_warning(server, window):
    # corpus/fsdp2_example_cpu wrote no trace (its script needs 2 GPUs): a committed run, not an error
    load(window, f"{server}/runs")
    main = window.locator('[data-testid="stMain"]')
    assert not main.locator('[data-testid="stAlertContentError"]').count()
    assert "fsdp2_example_cpu" in main.locator('[data-testid="stAlertContentWarning"]').first.inner_text()
    assert window.evaluate(CLIPPED) == []
    load(window, f"{server}/overview?run=fsdp2_example_cpu")
    assert not main.locator('[data-testid="stAlertContentError"]').count()
    assert "no trace" in main.locator('[data-testid="stAlertContentWarning"]').first.inner_text()


@pytest.mark.parametrize("run", ["failed_oom_backward", "hta_a100_80gb"])
def test_failed_and_public_runs_open_whole(server, window, run):
    load(window, f"{server}/overview?run={run}")
    assert window.evaluate(CLIPPED) == []
    assert window.evaluate(LEGEND_OVERLAPS) == []


@pytest.mark.parametrize("path", ["efficiency?run=gpu_fsdp2_370m", "memory?run=hta_a100_80gb"])
def test_efficiency_and_memory_pages_fit(server, window, path):
    # the model's sources, the kernel classes and the top kernels' names ran past the window
    load(window, f"{server}/{path}")
    assert window.evaluate(CLIPPED) == []
    assert window.evaluate(LEGEND_OVERLAPS) == []
    assert DECIMALS.findall(shown_text(window)) == []


def test_a_run_that_failed_before_its_trace_opens_on_every_page(server, window):
    # failed_oom_before_trace: a verdict from its records, no trace: the Memory and Communication
    # pages raised (min() of no rank, concat of no frame), the Timeline asked to "pick a rank" of none
    for page in ("overview", "timeline", "utilisation", "communication", "memory", "efficiency", "diagnoses"):
        load(window, f"{server}/{page}?run=failed_oom_before_trace")  # no traceback (load checks)
        text = window.locator('[data-testid="stMain"]').inner_text()
        assert "Pick at least one rank" not in text, page
        charts = window.locator('[data-testid="stPlotlyChart"]').count()
        # no chart of steps that were never traced (the device samples and memory records are the run's)
        assert charts == 0 or page in ("utilisation", "memory"), (page, charts)
        if page in ("overview", "timeline", "communication"):
            assert "No trace: the job ended before the profiler wrote one" in text, page


def test_compare_with_a_run_without_trace_draws_no_empty_chart(server, window):
    load(window, f"{server}/compare?a=failed_oom_before_trace&b=failed_oom_backward")
    empty = window.evaluate("""() => Array.from(document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot'))
        .filter(gd => !(gd._fullData || []).some(t => t.visible !== false && (t._length || 0) > 0))
        .map(gd => gd.querySelector('.gtitle')?.textContent)""")
    assert empty == []
    assert "No profiled step to draw" in window.locator('[data-testid="stMain"]').inner_text()
