"""The analysis cache follows the code: a rule edited after a run was cached gives the
edited rule's verdict, not the cached one. A key of the package version and
a hand-bumped SUMMARY_VERSION only would, after raising dataloader_stall's thresholds to 95/96/97 %, still
print the stall from the cache (``--no-cache`` would not)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.live


def _analyze(pkg_root: Path, run: Path, cache: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(pkg_root), WORKBENCH_CACHE_DIR=str(cache))
    out = subprocess.run([sys.executable, "-m", "workbench", "analyze", str(run), "--json"], capture_output=True,
                         text=True, timeout=300, env=env, cwd=pkg_root)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_an_edited_threshold_changes_the_cached_verdict(tmp_path):
    pkg = tmp_path / "src"
    shutil.copytree(ROOT / "workbench", pkg / "workbench", ignore=shutil.ignore_patterns("__pycache__"))
    run = tmp_path / "ddp_slow_data"
    shutil.copytree(ROOT / "traces" / "ddp_slow_data", run, ignore=shutil.ignore_patterns(".workbench-cache"))
    cache = tmp_path / "cache"
    first = _analyze(pkg, run, cache)
    assert "dataloader_stall" in {d["id"] for d in first["diagnoses"]}
    assert list(cache.glob("*/analysis.json")), "the first analysis must fill the cache"

    rule = pkg / "workbench" / "diagnose" / "rules" / "dataloader_stall.py"
    text = rule.read_text()
    for name, pct in (("INFO_PCT", 95.0), ("WARNING_PCT", 96.0), ("CRITICAL_PCT", 97.0)):
        text, n = re.subn(rf"^{name} = [0-9.]+$", f"{name} = {pct}", text, flags=re.M)
        assert n == 1, name
    rule.write_text(text)
    again = _analyze(pkg, run, cache)
    assert "dataloader_stall" not in {d["id"] for d in again["diagnoses"]}, "the cache gave the old rule's verdict"
