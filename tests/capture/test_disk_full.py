"""The run directory's disk fills up: a real size-limited filesystem (tmpfs,
mounted here; skipped where the test may not mount). Capture loses what it cannot write, says so
in one line per file, never stops the training, and keeps what is already on disk; analysis
works without its cache."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.live

TINY = """
import torch
m = torch.nn.Linear(64, 64); opt = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(12):
    loss = m(torch.randn(32, 64)).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()
print("trained 12 steps")
"""


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()[:80]}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_disk_full_while_capturing_keeps_training_and_what_was_written(small_disk, tmp_path):
    script = tmp_path / "tiny.py"
    script.write_text(TINY)
    run = small_disk / "run"
    r = subprocess.run([sys.executable, "-m", "workbench", "profile", "--out", str(run), str(script)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]  # the script's own exit code: it trained to the end
    assert "trained 12 steps" in r.stdout
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "could not write rank0.pt.trace.json.gz" in r.stderr and "training goes on" in r.stderr
    # what was written before the disk filled is kept: the manifest (whole: the previous version),
    # the per-step rows of the steps before the trace
    import json

    json.loads((run / "manifest.json").read_text())  # whole (an update that did not fit keeps the previous one)
    rows = (run / "steps_rank0.csv").read_text().splitlines()
    assert rows[0].startswith("step,") and len(rows) >= 3
    assert not list(run.glob("*.tmp")) and not list(run.glob(".*.tmp*")), "temporary files left on the full disk"


def test_analysis_on_a_full_cache_disk_still_answers(small_disk, monkeypatch):
    # fill the disk, then point the cache at it
    with open(small_disk / "filler", "wb") as f:
        try:
            f.write(b"\0" * (64 << 10))
        except OSError:
            pass
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(small_disk / "cache"))
    r = subprocess.run([sys.executable, "-m", "workbench", "analyze", str(ROOT / "traces" / "engine_ddp"), "--json"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert '"verdict"' in r.stdout
