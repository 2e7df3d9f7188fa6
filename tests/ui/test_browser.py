"""A real Streamlit server driven by a real Chromium (Debian's, through Playwright): the session's
server and browser (tests/ui/conftest.py). Screenshots go to tests/artifacts/ (gitignored).
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, TRACES

ARTIFACTS = ROOT / "tests" / "artifacts"

pytestmark = [pytest.mark.browser, pytest.mark.live]


def test_select_run_shows_chart_and_diagnosis(server, page):
    page.goto(server + "/")
    page.wait_for_selector('[data-testid="stSidebar"] [data-testid="stSelectbox"]')
    page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').click()
    # type to filter, as a user with many runs would: the dropdown renders only the options in view
    page.keyboard.type("ddp_slow_data")
    page.get_by_role("option", name="ddp_slow_data", exact=True).click()
    page.wait_for_function("() => location.search.includes('run=ddp_slow_data')")
    page.wait_for_selector('[data-testid="stPlotlyChart"] .main-svg')
    page.get_by_text("dataloader_stall", exact=False).first.wait_for()
    page.get_by_text("Verdict:").first.wait_for()
    # the stacked bar has a red "dataloader" segment for both ranks
    assert page.locator('[data-testid="stPlotlyChart"] .main-svg .legendtext', has_text="dataloader").count() >= 1
    page.wait_for_timeout(500)  # let plotly finish its transition before the picture
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "overview_ddp_slow_data.png"), full_page=True)
    assert not page.locator('[data-testid="stException"]').count()


def test_timeline_page_renders(server, page):
    page.goto(server + "/timeline?run=ddp_slow_data")
    page.wait_for_selector('[data-testid="stPlotlyChart"] .main-svg')
    page.get_by_text("rank 0 · dataloader").first.wait_for()
    page.wait_for_timeout(500)
    page.screenshot(path=str(ARTIFACTS / "timeline_ddp_slow_data.png"), full_page=True)
    assert not page.locator('[data-testid="stException"]').count()


def _listing(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


def test_upload_of_dotdot_and_bad_zip_is_refused(server, page, tmp_path):
    before_root, before_parent = _listing(TRACES), {p.name for p in ROOT.iterdir()}
    bad = tmp_path / "run.zip"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("../../evil.pt.trace.json", b"{}")
    bad.write_bytes(buf.getvalue())
    good = tmp_path / "rank0.pt.trace.json.gz"
    good.write_bytes((TRACES / "ddp_slow_data" / "rank0.pt.trace.json.gz").read_bytes())
    for file, name, message in ((good, "../x", "bad run name"), (bad, "evil", "path leaves the run directory")):
        page.goto(server + "/runs")  # a fresh form each time
        page.get_by_text("Add a run").wait_for()
        page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(file))
        # the uploader lists the file with its size once the browser has sent it
        page.wait_for_function("""() => /\\d(\\.\\d+)?\\s?(B|KB|MB)/.test(
            document.querySelector('[data-testid="stFileUploader"]').innerText)""")
        box = page.get_by_label("Run name")
        box.fill(name)
        page.get_by_role("button", name="Store").click()
        page.get_by_text(message, exact=False).first.wait_for()
        assert page.get_by_text("Upload refused").count() >= 1
    assert _listing(TRACES) == before_root
    assert {p.name for p in ROOT.iterdir()} == before_parent
    assert not (ROOT / "x").exists() and not (ROOT.parent / "evil.pt.trace.json").exists()


PAGES = {"overview": "ddp_slow_data", "timeline": "Timeline", "utilisation": "Utilisation", "communication": "Communication",
         "memory": "Memory", "diagnoses": "Diagnoses", "efficiency": "Efficiency", "runs": "Runs", "compare": "Compare",
         "plan": "Plan"}


def test_every_page_path_opens_with_its_run(server, page):
    # Streamlit serves its default page only at "/": /overview?run=… used to answer "Page not found"
    for path, title in PAGES.items():
        page.goto(f"{server}/{path}?run=ddp_slow_data")
        page.locator("h1", has_text=title).first.wait_for()
        assert not page.get_by_text("Page not found").count(), path
        assert "run=ddp_slow_data" in page.url, path
        assert not page.locator('[data-testid="stException"]').count(), path
    page.goto(server + "/overview?run=ddp_fixed_data")
    page.wait_for_selector('[data-testid="stPlotlyChart"] .main-svg')
    page.locator("h1", has_text="ddp_fixed_data").first.wait_for()  # the run of the link, not the first one
    assert not page.get_by_text("Page not found").count()


def test_efficiency_page_draws_mfu_and_kernel_classes(server, page):
    page.goto(server + "/efficiency?run=gpu_memory_heavy")
    page.wait_for_selector('[data-testid="stPlotlyChart"] .main-svg')
    page.get_by_text("GPU time per kernel class").first.wait_for()
    page.get_by_text("fp32_matmul").first.wait_for()
    # the page draws progressively (and may run again once the run is chosen): wait for the metric,
    # which fails the test if it never comes, rather than count what is there at one instant
    page.locator('[data-testid="stMetric"]', has_text="MFU").first.wait_for()
    page.wait_for_timeout(500)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "efficiency_gpu_memory_heavy.png"), full_page=True)
    assert not page.locator('[data-testid="stException"]').count()
