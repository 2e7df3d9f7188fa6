"""A plan file's figures are held to the schema and to what is physically possible before
``workbench compare RUN PLAN.json`` takes them as given (workbench.plan.plan_file): one line
naming the key, never a traceback, never a measured MFU of 7.5e20 %. Hypothesis fuzzes the
numbers of a real plan (property: read_plan returns the plan or raises the one-line error)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzzing import fuzz
from workbench.format.errors import WorkbenchError
from workbench.plan.plan_file import read_plan

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def plan_doc() -> dict:
    from workbench.calibration.request import build_request
    from workbench.plan.report import to_json
    from workbench.plan.search import plan

    return to_json(plan(build_request(model="engine-370m", gpus="8", gpu="H200", top="2")))


def _write(tmp_path, doc, text: str | None = None):
    p = tmp_path / "plan.json"
    p.write_text(text if text is not None else json.dumps(doc))
    return p


def _edited(doc, path: str, value):
    d = json.loads(json.dumps(doc))
    *head, last = path.split(".")
    x = d
    for k in head:
        x = x[int(k)] if k.isdigit() else x[k]
    x[last] = value
    return d


@pytest.mark.parametrize("path, value, says", [
    pytest.param("model.params", 10 ** 400, "model.params must be a number", id="params_400_digits"),  # OverflowError before
    ("model.model_flops_per_token", 1e30, "model_flops_per_token"),      # used as given: measured MFU 7.5e20 %
    ("model.model_flops_per_token", 1e15, "not this model's FLOPs"),     # past 2x its shape's 6·N + 12·L·h·s
    ("json_schema", "workbench.plan/2", "reads 'workbench.plan/1'"),      # accepted before
    ("json_schema", "workbench.plan/999", "reads 'workbench.plan/1'"),
    ("cluster.gpu", "Voodoo5 6000", "unknown GPU 'Voodoo5 6000': known ones are"),
    ("plans.0.time.mfu", 5.0, "fraction of the GPU's peak above 1"),
    ("plans.0.time.mfu", 1e300, "plans[0].time.mfu must be a number ≤"),
    ("plans.0.time.hfu", 1.5, "plans[0].time.hfu is 1.5"),
])
def test_impossible_plans_are_one_line(tmp_path, plan_doc, path, value, says):
    with pytest.raises(WorkbenchError) as e:
        read_plan(_write(tmp_path, _edited(plan_doc, path, value)))
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_the_plan_as_written_reads(tmp_path, plan_doc):
    assert read_plan(_write(tmp_path, plan_doc))["model"]["name"] == "engine-370m"


_numbers = st.one_of(st.integers(-(10 ** 30), 10 ** 30), st.integers(10 ** 300, 10 ** 400),
                     st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0, 1, 5.0, 1e300, -1]))
_PATHS = ["model.params", "model.layers", "model.hidden", "model.seq", "model.model_flops_per_token", "cluster.gpus",
          "plans.0.time.step_ms", "plans.0.time.mfu", "plans.0.time.tokens_per_s", "plans.0.memory.total_gib"]


@fuzz(150)
@given(edits=st.lists(st.tuples(st.sampled_from(_PATHS), _numbers), min_size=1, max_size=4))
def test_fuzzed_plan_numbers_read_or_fail_in_one_line(tmp_path_factory, plan_doc, edits):
    doc = plan_doc
    for path, v in edits:
        doc = _edited(doc, path, v)
    try:
        got = read_plan(_write(tmp_path_factory.mktemp("p"), doc))
    except WorkbenchError as e:
        assert "\n" not in str(e)
        return
    t = got["plans"][0]["time"]
    assert 0 <= t["mfu"] <= 1 and math.isfinite(t["step_ms"]) and t["step_ms"] > 0
    m = got["model"]
    assert m["model_flops_per_token"] <= 2 * (6 * m["params"] + 12 * m["layers"] * m["hidden"] * max(m["seq"], 0)) or \
        6 * m["params"] + 12 * m["layers"] * m["hidden"] * max(m["seq"], 0) <= 0
