"""The page registry: every page module is listed once and each of its pages registered once, the
app's sidebar built from the registry keeps every address users have bookmarked, and a page
registered anywhere shows up in it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT, TRACES
from workbench.ui import pages, registry

pytestmark = pytest.mark.live

UI = Path(pages.__file__).parent

# The users' URL contract: (section, title, url_path, visibility) as the sidebar lists them. The
# hidden default page is "/" (Streamlit gives the default page the url_path ""), forwarding to
# /overview with the query kept; bookmarks such as /timeline?run=NAME depend on every url_path here.
NAVIGATION = [
    ("Run", "Overview", "", "hidden"),
    ("Run", "Overview", "overview", "visible"),
    ("Run", "Timeline", "timeline", "visible"),
    ("Run", "History", "history", "visible"),
    ("Run", "Utilisation", "utilisation", "visible"),
    ("Run", "Communication", "communication", "visible"),
    ("Run", "Memory", "memory", "visible"),
    ("Run", "Efficiency", "efficiency", "visible"),
    ("Run", "Diagnoses", "diagnoses", "visible"),
    ("Runs", "Runs", "runs", "visible"),
    ("Runs", "Compare", "compare", "visible"),
    ("Before launch", "Plan", "plan", "visible"),
]


def decorated(path: Path) -> list[str]:
    """The functions a module registers as pages, read from its source: ``@page(…)``."""
    return [node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)
            for d in node.decorator_list
            if isinstance(d, ast.Call) and getattr(d.func, "id", getattr(d.func, "attr", None)) == "page"]


def app_navigation(monkeypatch) -> list[tuple[str, str, str, str]]:
    """What app.py hands st.navigation, run headless, as NAVIGATION's rows."""
    import streamlit as st

    seen: dict = {}
    real = st.navigation

    def spy(sections, **kw):
        seen.update(sections)
        return real(sections, **kw)

    monkeypatch.setattr(st, "navigation", spy)
    monkeypatch.setenv("WORKBENCH_TRACES", str(TRACES))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    return [(name, pg.title, pg.url_path, pg.visibility) for name, ps in seen.items() for pg in ps]


@pytest.fixture
def scratch_registry(monkeypatch):
    """The registry as it is, restored after the test: what a test registers goes with it."""
    pages.registered()  # every page module imported, so the copy holds them all
    monkeypatch.setattr(registry, "_PAGES", dict(registry._PAGES))


def test_every_page_module_is_listed_once_and_each_page_registered_once():
    from_source = {p.stem: names for p in UI.glob("*.py") if (names := decorated(p))}
    assert len(set(pages.MODULES)) == len(pages.MODULES)
    assert sorted(pages.MODULES) == sorted(from_source), "a module with @page is missing from ui.pages.MODULES"
    got = sorted((p.fn.__module__, p.fn.__name__) for p in pages.registered())
    assert got == sorted((f"workbench.ui.{m}", fn) for m, names in from_source.items() for fn in names)
    assert decorated(UI / "runs.py") == ["runs_page"] and decorated(UI / "state.py") == []  # the reader reads


def test_the_registry_is_the_url_contract_less_the_root():
    rows = [(s, p.title, p.url_path, "visible") for s, ps in pages.navigation().items() for p in ps]
    assert rows == [r for r in NAVIGATION if r[2]]


def test_the_app_routes_exactly_the_registered_pages(monkeypatch):
    assert app_navigation(monkeypatch) == NAVIGATION


def test_a_page_registered_here_is_in_the_app(monkeypatch, scratch_registry):
    @registry.page("Hello", url_path="hello", section="Runs", order=15)
    def hello_page() -> None:
        import streamlit as st

        st.write("hello")

    assert app_navigation(monkeypatch) == [*NAVIGATION[:10], ("Runs", "Hello", "hello", "visible"), *NAVIGATION[10:]]  # between Runs and Compare


def test_an_address_is_one_page_s(scratch_registry):
    def other_page() -> None:
        pass

    with pytest.raises(ValueError, match="already the page of workbench.ui.overview.timeline_page"):
        registry.page("Other", url_path="timeline", section="Run", order=99)(other_page)
    with pytest.raises(ValueError, match="section"):
        registry.page("Other", url_path="other", section="Elsewhere", order=1)(other_page)
    with pytest.raises(ValueError, match="url_path"):
        registry.page("Other", url_path="a/b", section="Run", order=1)(other_page)
    from workbench.ui.overview import timeline_page

    registry.page("Timeline", url_path="timeline", section="Run", order=20)(timeline_page)  # itself again: replaced
    assert [p.url_path for p in pages.registered()] == [r[2] for r in NAVIGATION if r[2]]


def test_the_registry_does_not_import_streamlit():
    code = "import sys, workbench.ui.registry\nprint('streamlit' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
