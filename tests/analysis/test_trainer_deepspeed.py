"""DeepSpeed ZeRO-3 read right, on real CPU runs of it (tests/analysis/data/ds_cpu_zero3*: DeepSpeed
0.19.8 on gloo, ``benchmarks/trainers/ds_zero.py`` under ``workbench profile``, one rank; one run with
the optimizer offloaded). ZeRO-3 wraps every module in its own autograd functions and, under
``zero.Init``-style linear wrapping, runs each linear as ``LinearFunctionForZeroStage3``, whose
backward multiplies with ``aten::matmul``: none of it is recomputation. The capture recognised the
engine and read its configuration (``trainer_rank0.json``); a bare trace still shows ZeRO-3."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from tests.conftest import DATA
from workbench.pipeline.verdict import analyze_run

pytestmark = pytest.mark.committed


def _names(run) -> set[str]:
    doc = json.loads(gzip.open(run / "rank0.pt.trace.json.gz").read())
    return {e.get("name") for e in doc["traceEvents"]}


@pytest.fixture(scope="module")
def zero3():
    return analyze_run(DATA / "ds_cpu_zero3").to_json()


@pytest.fixture(scope="module")
def offload():
    return analyze_run(DATA / "ds_cpu_zero3_offload").to_json()


def test_zero3s_own_autograd_functions_are_not_recomputation(zero3):
    names = _names(DATA / "ds_cpu_zero3")
    # the trace holds what was misread: the linear's own backward, its matmuls inside a backward node
    assert "autograd::engine::evaluate_function: LinearFunctionForZeroStage3Backward" in names
    assert "autograd::engine::evaluate_function: PreBackwardFunctionForModuleBackward" in names
    f = zero3["model"]["fields"]
    assert f["recompute"]["value"] == "none", f["recompute"]


def test_the_layout_is_deepspeeds_own(zero3, offload):
    lay = zero3["model"]["fields"]["layout"]
    assert lay["value"]["zero"] == 3 and lay["value"]["optimizer_offload"] is False
    assert "DeepSpeed's configuration" in lay["source"]
    lay = offload["model"]["fields"]["layout"]["value"]
    assert (lay["zero"], lay["optimizer_offload"], lay["param_offload"], lay["micro_batch"], lay["grad_accum"]) == \
        (3, True, False, 4, 1)
    t = offload["model"]["trainer"]
    assert (t["name"], t["step_base"]) == ("deepspeed", 1)
    assert "DeepSpeedEngine" in t["source"]


def test_a_bare_trace_still_shows_zero3(tmp_path):
    shutil.copy(DATA / "ds_cpu_zero3" / "rank0.pt.trace.json.gz", tmp_path / "rank0.pt.trace.json.gz")
    doc = analyze_run(tmp_path).to_json()
    assert doc["model"]["fields"]["layout"]["value"]["zero"] == 3
    assert doc["model"]["fields"]["recompute"]["value"] == "none"
    assert doc["model"]["trainer"]["name"] == "deepspeed" and "trace" in doc["model"]["trainer"]["source"]
