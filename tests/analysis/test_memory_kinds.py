"""Memory by category says what each figure rests on (workbench.analysis.memory_categories): measured,
inferred or unknown; weights resident at launch are weights at an out-of-memory error in the first
forward; an unknown is null, never folded into activations."""

from __future__ import annotations

import pytest

from workbench.analysis.memory_categories import rank_categories

pytestmark = pytest.mark.unit
GIB = 2 ** 30
OOM = {"allocated_bytes": 76.24 * GIB, "reserved_bytes": 76.54 * GIB}
LAUNCH = {"model": {"params_bytes": int(14.98 * GIB), "params_numel": 4_022_468_096, "params_by_device": {"cuda:0": int(14.98 * GIB)},
                    "grads_bytes": 0}, "optimizer": {"class": "torch.optim.adamw.AdamW", "state_bytes": 0}}


def test_weights_at_launch_are_weights_when_the_first_forward_fails():
    c = rank_categories(None, None, {}, OOM, launch=LAUNCH, failure={"phase": "forward", "step": 0})
    cats = c["by_category"]
    assert c["at"] == "out of memory"
    assert (cats["weights"]["gib"], cats["weights"]["kind"]) == (14.98, "measured")
    assert (cats["gradients"]["bytes"], cats["optimizer"]["bytes"]) == (0, 0)
    assert cats["activations"]["gib"] == round(76.24 - 14.98, 3) and cats["activations"]["kind"] == "measured"
    assert cats["other"]["gib"] == 0.3 and c["sum_gib"] == pytest.approx(76.54, abs=0.01)


def test_weights_on_the_host_are_not_device_memory():
    launch = {"model": {"params_bytes": 10 * GIB, "params_by_device": {"cuda:0": 4 * GIB, "cpu": 6 * GIB}}, "optimizer": {"state_bytes": 0}}
    c = rank_categories(None, None, {}, OOM, launch=launch, failure={"phase": "forward", "step": 0})
    assert c["by_category"]["weights"]["gib"] == 4.0


def test_gradients_freed_by_zero_grad_in_a_later_forward():
    record = {"first_step": {"params_bytes": 30 * GIB, "grads_bytes": 30 * GIB, "optimizer_bytes": 60 * GIB, "optimizer": "AdamW"}}
    oom = {"allocated_bytes": 138.4 * GIB, "reserved_bytes": 138.5 * GIB}
    later = rank_categories(record, None, {}, oom, failure={"phase": "forward", "step": 1})["by_category"]
    assert (later["gradients"]["gib"], later["gradients"]["kind"]) == (0.0, "inferred")
    assert later["activations"]["gib"] == pytest.approx(138.4 - 90, abs=0.01)
    backward = rank_categories(record, None, {}, oom, failure={"phase": "backward", "step": 1})["by_category"]
    assert backward["gradients"]["gib"] == 30.0 and backward["gradients"]["kind"] == "measured"


def test_unknown_model_states_leave_activations_unknown():
    c = rank_categories(None, None, {}, OOM)
    cats = c["by_category"]
    assert all(cats[k]["gib"] is None and cats[k]["kind"] == "unknown" for k in ("weights", "gradients", "optimizer", "activations"))
    assert cats["other"]["kind"] == "measured"  # reserved less allocated is the allocator's own figure
    assert "not split" in cats["activations"]["source"]


def test_inferred_states_make_inferred_activations():
    c = rank_categories(None, None, {"params_total": 1_000_000_000, "optimizer": "adamw"}, OOM)
    cats = c["by_category"]
    assert {k: cats[k]["kind"] for k in cats} == {"weights": "inferred", "gradients": "inferred", "optimizer": "inferred",
                                                  "activations": "inferred", "other": "measured"}
