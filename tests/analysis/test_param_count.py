"""Ψ counted from a trace's weights (analysis.memory.count_params), checked against the models'
own definitions, by hand."""

from __future__ import annotations

import json

import pytest

from tests.conftest import DATA
from tests.conftest import TRACES
from workbench.analysis.memory import count_params, weight_shapes
from workbench.load.trace import read_trace

pytestmark = pytest.mark.committed


def _mlp(d: int) -> int:
    # slow_data_ddp.py: Linear(d, 4d), Linear(4d, 4d), Linear(4d, 1), with biases
    return (d * 4 * d + 4 * d) + (16 * d * d + 4 * d) + (4 * d + 1)


def test_cpu_mlp_ignores_the_dataloaders_matmuls():
    # num_workers=0: the per-sample transform's 32 128×128 mm per step run on the main thread
    t = read_trace(TRACES / "ddp_slow_data" / "rank0.pt.trace.json.gz")
    assert count_params(t) == _mlp(256) == 1_313_793
    assert list(weight_shapes(t)["weight_dims"]) == [(256, 1024), (1024, 1024), (1024, 1)]


def test_gpu_mlp():
    assert count_params(read_trace(TRACES / "gpu_memory_heavy" / "rank0.pt.trace.json.gz")) == _mlp(4096)


def test_conv_net_weights_and_head():
    # tests/scripts/gpu_efficiency.py conv_net: 3×3 convs 3→64→64→128→128→256→256 (no bias), Linear(256, 1000)
    chans = [3, 64, 64, 128, 128, 256, 256]
    convs = sum(a * b * 9 for a, b in zip(chans, chans[1:]))
    assert count_params(read_trace(DATA / "eff_conv_nchw_fp32" / "rank0.pt.trace.json.gz")) == convs + 256 * 1000 + 1000


@pytest.mark.parametrize("name", ["engine_healthy", "case_gpu_2_preload_shm"])
def test_engine_gpt_within_one_percent_of_its_config(name):
    # the engine's GPT (tied embeddings): 12·L·d² in the blocks + V·d for the head; the trace also
    # sees the biases, and misses the position embedding and norm scales (< 1 % here)
    m = json.loads((TRACES / name / "manifest.json").read_text())["config"]["model"]
    assert m["tie_embeddings"]
    expected = 12 * m["n_layer"] * m["d_model"] ** 2 + m["vocab"] * m["d_model"]
    assert count_params(read_trace(TRACES / name / "rank0.pt.trace.json.gz")) == pytest.approx(expected, rel=0.01)
