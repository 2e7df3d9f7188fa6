"""benchmarks/layouts.py (the table it fills on GPUs) runs end to end on gloo ranks, and its
tokens/s counts a tensor-parallel batch once: the ranks' `tokens` shares add up to the batch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.live]


def test_tp_layout_row_counts_the_shared_batch_once(tmp_path):
    out = tmp_path / "layouts.json"
    r = subprocess.run([sys.executable, "-m", "benchmarks.layouts", "--nproc", "2", "--only", "tp", "--no-twins",
                        "--steps", "6", "--out", str(tmp_path / "runs"), "--json", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["name"] == "tp" and row["ok"] and row["world"] == 2
    batch_tokens = 4 * 64  # ddp_tiny: batch 4 x seq 64, split over heads, not over samples
    assert row["tokens_per_s"] == pytest.approx(batch_tokens / (row["step_ms"] / 1e3), rel=0.01)
    assert row["mfu_pct"] is None  # no peak FLOP/s on CPU
    assert "| tp | 2 |" in r.stdout
