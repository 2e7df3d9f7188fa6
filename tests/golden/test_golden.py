"""Every command, the app and the report give the results recorded in the goldens, on every committed run.

The goldens (tests/golden/analyze.json.gz, ``python -m tests.golden.record``) hold what
``workbench analyze --json`` printed for each run under traces/ (or its one-line refusal). Per run:

(a) ``workbench analyze --json --no-cache RUN`` (computed fresh) equals the golden, numbers within
    a relative 1e-6;
(b) ``workbench analyze RUN`` prints the golden's verdict and each diagnosis (id, severity, title,
    fix), and the result it cached equals the golden too;
(c) ``workbench report RUN --html OUT`` shows the verdict, each diagnosis' title and fix and the
    step time as the golden states them;
(d) the app's Overview and Diagnoses pages show the verdict and each diagnosis (a representative
    subset: the app is the slowest part).

All runs are marked ``slow`` (CI's full run); FAST, a representative subset, runs unmarked. Each run
gets its own analysis cache directory, which (b) fills and (c) and (d) read; (a) computes with
--no-cache and an empty cache directory of its own.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from workbench.present.shown import alternative_line

from tests.golden import golden

pytestmark = pytest.mark.committed

GOLD = golden.load_golden()

# CPU 2 ranks (a critical stall), a healthy run (no diagnosis), a pipeline, GPU (oom_risk), a
# corpus GPU run with the planner's alternatives, one with five diagnoses, a corpus CPU run, a
# refused run, public traces (2 sampled ranks; an old Kineto format)
FAST = ["ddp_slow_data", "engine_healthy", "engine_pp_gpipe_m2", "gpu_memory_heavy", "corpus/torchtitan_8b_full_gpu",
        "corpus/imagenet_resnet50_gpu", "corpus/word_lm_cpu", "corpus/lightning_bug_report_cpu",
        "public/hta_sampled_ranks", "public/kineto_v100_2021"]
APP = FAST


def _params(names):
    return [pytest.param(n, id=n, marks=() if n in FAST else pytest.mark.slow) for n in names]


ALL = _params(sorted(GOLD))


@pytest.fixture(scope="session")
def caches(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("golden-caches")


@pytest.fixture
def run_cache(caches, monkeypatch, request) -> Path:
    """This run's own analysis cache (WORKBENCH_CACHE_DIR), kept across (a)–(d) in the session."""
    d = caches / request.node.callspec.params["run"].replace("/", "__")
    d.mkdir(exist_ok=True)
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(d))
    monkeypatch.setenv("COLUMNS", "1000")  # rich wraps at 80 columns otherwise
    return d


def path_of(run: str) -> Path:
    return golden.TRACES / run


def flat(text: str) -> str:
    return " ".join(text.split())


def assert_same(run: str, entry: dict) -> None:
    diffs = list(golden.differences(GOLD[run], entry))
    if diffs:
        pytest.fail(golden.explain(run, diffs), pytrace=False)


def test_every_committed_run_has_a_golden():
    now = {name for name, _ in golden.committed_runs()}
    missing, gone = sorted(now - set(GOLD)), sorted(set(GOLD) - now)
    assert not missing and not gone, (f"runs without a golden: {missing}; goldens of runs that are gone: {gone}; "
                                      f"record them: {golden.REGENERATE}")


@pytest.mark.parametrize("run", ALL)
def test_analyze_json_equals_the_golden(run, run_cache, tmp_path, monkeypatch):
    # an empty cache directory of its own, which --no-cache must leave empty
    empty = tmp_path / "empty"
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(empty))
    assert_same(run, golden.analyze_json(path_of(run), cache=False))
    assert not empty.exists() or not any(empty.iterdir()), f"{run}: analyze --no-cache wrote a cache"


@pytest.mark.parametrize("run", ALL)
def test_analyze_text_states_the_golden(run, run_cache):
    gold = GOLD[run]
    code, out, err = golden.cli("analyze", golden.run_arg(path_of(run)))
    if not gold["ok"]:
        assert (code, golden.normalise(err.strip(), path_of(run))) == (gold["exit_code"], gold["error"])
        return
    assert code == 0, err
    doc, text = gold["doc"], flat(out)
    expected = [f"verdict: {doc['verdict']}"]
    for d in doc["diagnoses"]:
        expected += [f"{d['severity'].upper()} {d['id']}: {d['title']}", f"fix: {d['recommendation']}"]
    missing = [s for s in map(flat, expected) if s not in text]
    assert not missing, f"{run}: `workbench analyze` does not print {missing}"
    assert text.rstrip().endswith(flat(expected[0])), f"{run}: the verdict is not the last line"
    # what that command cached is what --json now prints from the cache: the golden too
    assert any(run_cache.iterdir()), "analyze wrote no cache"
    assert_same(run, golden.analyze_json(path_of(run), cache=True))


STEP = re.compile(r'<div class="kpi">Step time<b>([^<]*)</b>')


@pytest.mark.parametrize("run", ALL)
def test_report_states_the_golden(run, run_cache, tmp_path):
    gold, out = GOLD[run], tmp_path / "report.html"
    code, _, err = golden.cli("report", golden.run_arg(path_of(run)), "--html", out)
    if not gold["ok"]:
        assert (code, golden.normalise(err.strip(), path_of(run))) == (gold["exit_code"], gold["error"])
        assert not out.exists()
        return
    assert code == 0, err
    doc, text, e = gold["doc"], out.read_text(encoding="utf-8"), html.escape
    expected = [f"Verdict: {e(doc['verdict'])}</p>"]
    for d in doc["diagnoses"]:
        expected += [f'id="{e(d["id"])}"', f"{e(d['severity'])} — {e(d['title'])}</p>",
                     f"<p><b>Fix:</b> {e(d['recommendation'])}</p>"]
        # the planner's answers to the finding, worded as the CLI and the app word them
        expected += [f"<li>{e(alternative_line(a))}</li>" for a in d.get("alternatives") or []]
    missing = [s for s in expected if s not in text]
    assert not missing, f"{run}: the report lacks {missing}"
    assert text.count('<div class="diag" ') == len(doc["diagnoses"])
    if not doc["diagnoses"]:
        assert "No bottleneck found." in text
    shown = STEP.search(text)
    assert shown, f"{run}: no step time in the report"
    step_ms = doc["metrics"].get("step_ms")
    if step_ms is None:
        assert shown.group(1) == "—"
    else:  # printed to 0.1 ms, from the unrounded figure the golden rounds
        assert shown.group(1).endswith(" ms") and abs(float(shown.group(1)[:-3]) - step_ms) <= 0.0501, (
            f"{run}: report step time {shown.group(1)}, golden {step_ms} ms")


def _page(name: str) -> None:
    from workbench.ui import pages

    {p.fn.__name__: p.fn for p in pages.registered()}[name]()  # the page registry (workbench.ui.registry)


def _app(run: str, page: str | None, monkeypatch):
    """The app (app.py, its default page: Overview) or one page, on the run's root under traces/."""
    from streamlit.testing.v1 import AppTest

    path = path_of(run)
    monkeypatch.setenv("WORKBENCH_TRACES", str(path.parent))
    if page is None:
        at = AppTest.from_file(str(golden.ROOT / "app.py"), default_timeout=300)
    else:
        at = AppTest.from_function(_page, args=(page,), default_timeout=300)
    at.query_params["run"] = path.name
    at.run()
    assert not at.exception, [x.value for x in at.exception]
    return at


@pytest.mark.parametrize("run", _params(APP))
@pytest.mark.parametrize("page", [None, "diagnoses_page"], ids=["overview", "diagnoses"])
def test_app_shows_the_golden(run, page, run_cache, monkeypatch):
    gold = GOLD[run]
    at = _app(run, page, monkeypatch)
    if not gold["ok"]:  # the app's one line is the CLI's, less its "workbench: error: "; a run that wrote
        # no trace is a warning ("Not analysed: …", with what its manifest holds), any other an error
        shown = ["workbench: error: " + golden.normalise(str(x.value).removeprefix("Not analysed: "), path_of(run))
                 for x in [*at.error, *at.warning]]
        assert gold["error"] in shown, (run, shown, gold["error"])
        return
    doc = gold["doc"]
    banners = [str(x.value) for x in [*at.error, *at.warning, *at.success]]
    assert f"**Verdict:** {doc['verdict']}" in banners, (run, banners[:3])
    shown = [str(m.value) for m in at.markdown]
    expected = []
    for d in doc["diagnoses"]:
        expected += [f"**{d['id']}** · {d['severity']} — {d['title']}", f"**Fix:** {d['recommendation']}"]
    missing = [s for s in expected if not any(s in m for m in shown)]
    assert not missing, f"{run}: the app does not show {missing}"
    if not doc["diagnoses"]:
        assert "No bottleneck found." in [str(x.value) for x in at.success]
    if page is None:
        step = next(m for m in at.metric if m.label == "Step time").value
        step_ms = doc["metrics"].get("step_ms")
        if step_ms is None:
            assert step == "—", (run, step)
        else:
            assert abs(float(step.removesuffix(" ms")) - step_ms) <= 0.0501, (run, step, step_ms)
