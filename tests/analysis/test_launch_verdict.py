"""The verdict of a job that ran out of memory in its first forward, before any trace
(traces/failed_oom_first_forward_cpu: tests/scripts/lm_train.py --fail-first-forward --tied --ac op,
under ``workbench profile`` on the CPU with PyTorch's CUDA message of an 80 GB H100): the model from
its launch record, the weights measured, every memory category with its kind, and alternatives
measured on the job's own model that never include the layout that failed or one recomputing less."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS
from workbench.pipeline import Options
from workbench.present.shown import shown

pytestmark = pytest.mark.committed
RUN = Path(__file__).resolve().parents[2] / "traces" / "failed_oom_first_forward_cpu"
GIB = 2 ** 30


@pytest.fixture(scope="module")
def result():
    return shown(RUN, Options(cache=False)).result


def test_the_model_comes_from_the_launch_record(result):
    sys.path.insert(0, str(SCRIPTS))
    import lm_train

    model = lm_train.build("op", tied=True)
    f = result.model.fields
    assert f["params_total"]["value"] == sum(p.numel() for p in model.parameters())  # the tied table once
    assert f["params_total"]["source"].startswith("the launch record")
    assert {k: f[k]["value"] for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "tied", "seq", "micro_batch",
                                       "recompute", "optimizer")} == {
        "layers": 3, "hidden": 128, "heads": 4, "kv_heads": 2, "ffn": 384, "vocab": 2048, "tied": True, "seq": 256,
        "micro_batch": 2, "recompute": "selective", "optimizer": "adamw"}
    assert "selective-op" in f["recompute"]["source"]
    assert result.run.warnings and any("no trace" in w for w in result.run.warnings)


def test_weights_are_weights_at_an_out_of_memory_error_in_the_first_forward(result):
    launch = json.loads((RUN / "launch_rank0.json").read_text())
    cats = result.memory["by_category"]
    assert result.memory["at"] == "out of memory"
    assert cats["weights"]["bytes"] == launch["model"]["params_bytes"] and cats["weights"]["kind"] == "measured"
    assert cats["gradients"]["bytes"] == 0 and cats["optimizer"]["bytes"] == 0  # none before a first step, measured
    # PyTorch's own figures: 76.24 GiB allocated, 309.12 MiB reserved but unallocated
    assert abs(cats["activations"]["bytes"] - (76.24 * GIB - launch["model"]["params_bytes"])) < 0.01 * GIB
    assert abs(cats["other"]["gib"] - 309.12 / 1024) < 0.01
    assert all(c["kind"] in ("measured", "inferred", "unknown") and c["source"] for c in cats.values())


def test_the_alternatives_are_measured_on_the_jobs_own_model(result):
    oom = result.finding("out_of_memory")
    fake = json.loads((RUN / "fake_step_rank0.json").read_text())
    job = next(m for m in fake["measurements"] if m["layout"] == "job")
    assert job["recompute"] == "selective-op" and job["micro_batch"] == 2
    alts = oom.alternatives
    assert alts and all(a["source"].startswith("fake-tensor measurement") and a["gpus"] == 1 for a in alts)
    for a in alts:
        s = a["settings"]
        assert not (s["recompute"] in ("none", "selective-op") and s["micro_batch"] >= 2)  # no less than what failed
        assert a["memory_gib"] * GIB < job["peak_bytes"]
        assert a["step_ms"] is None  # a CPU run: no device peak to time a step on
    by = {(a["settings"]["recompute"], a["settings"]["micro_batch"]): a for a in alts}
    full = next(m for m in fake["measurements"] if m["layout"] == "recompute full")
    assert by[("full", 2)]["memory_gib"] == round(full["peak_bytes"] / GIB, 2)
