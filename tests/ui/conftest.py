"""One real Streamlit server and one real Chromium for every browser test of the session.

The server serves a traces root of links to committed runs of each kind a newcomer meets: CPU
gloo runs, GPU runs, a public trace, a failed run, MoE runs and a run that wrote no trace. A root
of a few runs keeps the Runs page (which analyses every small run) quick, and uploads land in it,
never in traces/.

Skipped only where chromium is absent and we are not in CI; in CI (``CI`` set) it must run —
``make test`` installs chromium (``make browser``) and playwright (the ``test`` extra).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT, TRACES, _free_port

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
TIMEOUT_MS = 120_000  # 2 shared cores: a cold analysis plus the first render can take a while
APP_RUNS = ("ddp_slow_data", "ddp_fixed_data", "gpu_memory_heavy", "gpu_fsdp2_370m", "failed_oom_backward",
            "failed_oom_before_trace", "engine_moe_skewed", "hf_qwen3_moe_cpu", "corpus/fsdp2_example_cpu",
            "public/hta_a100_80gb")
"""The committed runs the browser tests' server lists (paths under traces/)."""
WINDOW = {"width": 1280, "height": 800}
"""A newcomer's window: what every page must fit."""


def need_browser():
    if not CHROMIUM.exists() and not os.environ.get("CI"):
        pytest.skip("no /usr/bin/chromium (run `make browser`); this test is required in CI")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    return sync_playwright


@pytest.fixture(scope="session")
def app_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("app_traces")
    for run in APP_RUNS:
        (root / Path(run).name).symlink_to(TRACES / run, target_is_directory=True)
    return root


@pytest.fixture(scope="session")
def server(tmp_path_factory, app_root):
    need_browser()
    port = _free_port()
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.address", "127.0.0.1",
             "--server.port", str(port), "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
             "--", "--traces", str(app_root)],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"streamlit exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"streamlit not healthy after 120 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture(scope="session")
def browser(server):
    sync_playwright = need_browser()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def page(browser):
    """A large window, for tests of what pages do."""
    pg = browser.new_page(viewport={"width": 1500, "height": 1100})
    pg.set_default_timeout(TIMEOUT_MS)
    yield pg
    pg.close()


@pytest.fixture(scope="module")
def window(browser):
    """A 1280×800 window, for tests of what a newcomer sees."""
    pg = browser.new_page(viewport=WINDOW)
    pg.set_default_timeout(TIMEOUT_MS)
    yield pg
    pg.close()
