"""A job that runs out of memory in its first forward, before any trace, under ``workbench profile``
(tests/scripts/lm_train.py on the CPU, the error PyTorch raises on an 80 GB H100): the launch record
and the fake-tensor steps are written, and ``workbench analyze`` gives ``out_of_memory`` with the
model, its weights measured, and alternatives measured on the job's own model."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from tests.conftest import SCRIPTS, workbench

pytestmark = [pytest.mark.slow, pytest.mark.live]
sys.path.insert(0, str(SCRIPTS))
import lm_train  # noqa: E402

GIB = 2 ** 30


def test_out_of_memory_in_the_first_forward_keeps_the_model_and_its_weights(tmp_path):
    out = tmp_path / "run"
    r = workbench("profile", "--out", out, SCRIPTS / "lm_train.py", "--fail-first-forward", "--tied", "--ac", "op")
    assert r.returncode == 1, r.stderr[-3000:]
    assert not list(out.glob("*.pt.trace.json*"))  # no trace: the job died before the profiler wrote one
    launch = json.loads((out / "launch_rank0.json").read_text())
    assert launch["written"][:2] == ["first_forward", "first_forward_end"] and "first_step" not in launch["written"]
    fake = json.loads((out / "fake_step_rank0.json").read_text())
    assert fake["after"] == "out of memory" and fake["measurements"][0]["layout"] == "job"
    assert {m["layout"] for m in fake["measurements"]} >= {"job", "recompute full", "recompute none", "micro-batch 1"}

    doc = json.loads(workbench("analyze", out, "--json", "--no-cache").stdout)
    oom = next(d for d in doc["diagnoses"] if d["id"] == "out_of_memory")
    model = lm_train.build("op", tied=True)
    f = {k: v["value"] for k, v in doc["model"]["fields"].items()}
    assert f["params_total"] == sum(p.numel() for p in model.parameters())  # the tied table once
    assert (f["layers"], f["heads"], f["kv_heads"], f["vocab"], f["tied"], f["seq"], f["micro_batch"], f["recompute"]) == (
        3, 4, 2, 2048, True, 256, 2, "selective")
    cats = oom["evidence"]["memory_by_category"]
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    assert cats["weights"] == round(weights / GIB, 3) and cats["gradients"] == 0 and cats["optimizer"] == 0
    assert cats["activations"] == round(76.24 - weights / GIB, 2) or abs(cats["activations"] - (76.24 - weights / GIB)) < 0.01
    kinds = {k: v["kind"] for k, v in doc["memory"]["by_category"].items()}
    assert kinds == {"weights": "measured", "gradients": "measured", "optimizer": "measured", "activations": "measured",
                     "other": "measured"}
    alts = oom["alternatives"]
    assert alts and all(a["source"].startswith("fake-tensor measurement") for a in alts)
    # never the job's own layout, nor less recomputation at the same micro-batch
    assert not any(a["settings"]["recompute"] == "none" and a["settings"]["micro_batch"] == 2 for a in alts)
    assert not any(a["settings"] == {"recompute": "selective-op", "micro_batch": 2, "grad_accum": 1} for a in alts)
    assert any(a["settings"]["recompute"] == "full" for a in alts)
    job = next(m for m in fake["measurements"] if m["layout"] == "job")
    assert all(a["memory_gib"] * GIB < job["peak_bytes"] for a in alts)
    assert torch.__version__  # the capture ran on this machine's torch
