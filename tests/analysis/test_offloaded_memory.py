"""Offloaded states are host memory: a GPU rank's optimizer holding its states (and fp32 masters) on
the CPU — DeepSpeed's ``offload_optimizer`` — has them beside the device's categories, not in them.
The record is shaped as workbench.capture.memory writes it (its ``*_by_device``)."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.analysis.memory_categories import GIB, host_states, rank_categories

pytestmark = pytest.mark.unit


def record(device: str, cpu_params: int, cpu_state: int) -> dict:
    return {"device": device, "first_step": {
        "optimizer": "AdamW", "params_bytes": 4 * GIB, "params_by_device": {"cpu": cpu_params, "cuda": 4 * GIB - cpu_params},
        "grads_bytes": 1 * GIB, "grads_by_device": {"cuda": 1 * GIB},
        "optimizer_bytes": 8 * GIB, "optimizer_by_device": {"cpu": cpu_state, "cuda": 8 * GIB - cpu_state}}}


def test_offloaded_states_are_host_memory():
    steps = pd.DataFrame({"max_mem_allocated_bytes": [3 * GIB], "max_mem_reserved_bytes": [4 * GIB]})
    c = rank_categories(record("cuda", 4 * GIB, 8 * GIB), steps)
    cats = c["by_category"]
    assert cats["optimizer"]["bytes"] == 0 and cats["weights"]["bytes"] == 0  # none of it on the device
    assert cats["host"]["bytes"] == 12 * GIB and "offloaded" in cats["host"]["source"]
    assert cats["activations"]["bytes"] == 2 * GIB  # allocated less the device's model states (gradients)
    assert c["sum_gib"] == 4.0  # the device's categories still add up to its peak reserved


def test_states_on_the_device_stay_device_memory():
    steps = pd.DataFrame({"max_mem_allocated_bytes": [14 * GIB], "max_mem_reserved_bytes": [15 * GIB]})
    c = rank_categories(record("cuda", 0, 0), steps)
    assert c["by_category"]["optimizer"]["bytes"] == 8 * GIB and "host" not in c["by_category"]
    assert host_states(record("cpu", 4 * GIB, 8 * GIB)) == {}  # a CPU rank has no host/device split
