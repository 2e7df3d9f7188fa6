"""Time to the app's first view of a run whose trace is ≥ 200 MB.

    python -m benchmarks.app_first_view [--min-mb 200] [--source traces/gpu_slow_data] [--keep DIR]

Builds a run in a temporary directory by replicating the profiled steps of a committed trace
(``benchmarks.synthetic.make_run``: timestamps shifted, ``ProfilerStep#N`` renumbered) until the
plain-JSON trace reaches ``--min-mb`` MiB, starts ``streamlit run app.py`` on it, opens the Overview in Debian's chromium
through Playwright and prints the seconds from navigation until the Overview's plotly chart and
the verdict are visible. Nothing is written to the repository; the result goes in BENCHMARKS.md
by hand ("App first view").
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benchmarks.measure import ROOT
from benchmarks.synthetic import make_run

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_health(url: str, proc: subprocess.Popen, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError("streamlit did not become healthy")


def first_view_seconds(traces_root: Path, run: str, timeout_s: float = 300) -> float:
    """Seconds from navigation to the Overview's plotly chart and verdict being visible."""
    from playwright.sync_api import sync_playwright

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none", "--", "--traces", str(traces_root)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        _wait_health(url, proc, 120)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            t = time.monotonic()
            page.goto(f"{url}/overview?run={run}")
            page.wait_for_selector('[data-testid="stPlotlyChart"] .main-svg', timeout=timeout_s * 1000)
            page.get_by_text("Verdict:").first.wait_for(timeout=timeout_s * 1000)
            elapsed = time.monotonic() - t
            browser.close()
        return elapsed
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--min-mb", type=int, default=200)
    ap.add_argument("--source", type=Path, default=ROOT / "traces" / "gpu_slow_data")
    ap.add_argument("--keep", type=Path, default=None, help="build the run here and keep it (default: a temp dir)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wb-bench-")) if args.keep is None else args.keep
    try:
        t = time.monotonic()
        trace, size, n = make_run(args.source, tmp / "big_run", args.min_mb * (1 << 20) / 1e6)
        print(f"built {trace} ({size / 2**20:.0f} MiB, {n:,} events) in {time.monotonic() - t:.1f} s")
        secs = first_view_seconds(tmp, "big_run")
        print(f"app first view: {secs:.2f} s (target < 10 s)")
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
