"""The measured alternatives of a run that ran out of memory (workbench.calibration.fake_alternatives)
on the committed traces/failed_oom_first_forward_cpu, told it ran on an 80 GB H100: each step is the
roofline over its fake step's ops at the H100's peaks and the rates of committed GPU runs, the
fastest first; a layout that leaves less than 10 % of the device free is not offered, nor the one that
failed, nor one that recomputes no more."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from workbench.calibration.fake_alternatives import measured_alternatives, roofline_ms
from workbench.hardware.peaks import device_peak
from workbench.load import load_run
from workbench.pipeline import Options
from workbench.calibration.fake_efficiency import CALIBRATED
from workbench.present.shown import shown

pytestmark = pytest.mark.committed
RUN = Path(__file__).resolve().parents[2] / "traces" / "failed_oom_first_forward_cpu"
GIB = 2 ** 30


def on_h100(tmp_path, capacity_gib: float = 79.18) -> Path:
    run = tmp_path / RUN.name
    shutil.copytree(RUN, run)
    m = json.loads((run / "manifest.json").read_text())
    m.update(device_name="NVIDIA H100 80GB HBM3", device_memory_bytes=int(capacity_gib * GIB))
    (run / "manifest.json").write_text(json.dumps(m))
    return run


def test_steps_are_the_roofline_of_each_fake_step_fastest_first(tmp_path):
    run = on_h100(tmp_path)
    result = shown(run, Options(cache=False)).result
    found = measured_alternatives(result, load_run(run))
    fake = {m["layout"]: m for m in json.loads((run / "fake_step_rank0.json").read_text())["measurements"]}
    peak = device_peak("H100")
    alts = found["alternatives"]
    assert [a["step_ms"] for a in alts] == sorted(a["step_ms"] for a in alts)
    full = next(a for a in alts if a["settings"] == {"recompute": "full", "micro_batch": 2, "grad_accum": 1})
    want = roofline_ms(fake["recompute full"]["tally"], peak, "tf32", CALIBRATED)[0]  # fp32 weights, no autocast
    assert full["step_ms"] == round(want, 1) and "not anchored on a measured step" in full["basis"]
    assert full["line"].startswith("torch.utils.checkpoint")  # no trainer recognised: plain PyTorch's line
    # the failed layout (op-level selective at micro-batch 2) and less recomputation are never offered
    rejected = {(a["settings"]["recompute"], a["settings"]["micro_batch"]): a["rejected"] for a in found["rejected"]}
    assert "ran out of memory" in rejected[("none", 2)]
    assert all(not (a["settings"]["recompute"] in ("none", "selective-op") and a["settings"]["micro_batch"] == 2) for a in alts)
    assert found["job"]["memory_gib"] == round(fake["job"]["peak_bytes"] / GIB, 2)


def test_a_layout_without_headroom_is_not_offered(tmp_path):
    fake = {m["layout"]: m for m in json.loads((RUN / "fake_step_rank0.json").read_text())["measurements"]}
    # a device just big enough for the full-recomputation layout, not with 10 % free
    cap = fake["recompute full"]["peak_bytes"] / 0.95 / GIB
    run = on_h100(tmp_path, cap)
    found = measured_alternatives(shown(run, Options(cache=False)).result, load_run(run))
    full = [a for a in found["rejected"] if a["settings"]["recompute"] == "full" and a["settings"]["micro_batch"] == 2]
    assert full and "less than 10% free" in full[0]["rejected"]
    assert all(a["memory_gib"] <= 0.9 * cap + 0.01 for a in found["alternatives"])
