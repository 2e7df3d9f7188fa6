"""Whatever a manifest says beside real traces, the run analyses or fails in one line, and its
``--json`` is strict JSON whose partial and mixed-device keys say what they should (hypothesis:
property-based fuzzing of the manifest as the whole pipeline reads it, not only its reader)."""

from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.conftest import TRACES
from tests.fuzzing import fuzz
from workbench.format.errors import WorkbenchError
from workbench.format.jsonout import dumps

pytestmark = pytest.mark.committed

RUN = TRACES / "engine_ddp"  # 2 gloo ranks
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8))
_json = st.recursive(_scalar, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=6), c, max_size=3)),
                     max_leaves=6)
_rank = st.fixed_dictionaries({}, optional={"device": st.sampled_from(["cpu", "cuda:0"]) | _scalar,
                                            "device_name": st.sampled_from(["NVIDIA H200", "NVIDIA A100-SXM4-80GB", "[/bold]"]) | _scalar})
_edits = st.fixed_dictionaries({}, optional={
    "world_size": st.integers(-2, 20_000) | _scalar,
    "status": st.sampled_from(["ok", "failed", "interrupted"]) | _scalar,
    "error": st.text(max_size=20) | _scalar,
    "device_name": st.sampled_from(["NVIDIA H200", "[link=x]gpu"]) | _scalar,
    "ranks": st.dictionaries(st.sampled_from(["0", "1", "7", "x"]), _rank | _json, max_size=3) | _json,
    "schedule": st.fixed_dictionaries({}, optional={"warmup": _scalar, "active": _scalar}) | _json,
})


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("manifest-fuzz") / "run"
    shutil.copytree(RUN, d, ignore=shutil.ignore_patterns(".workbench-cache"))
    return d


@pytest.mark.slow  # ~1 s an example (an analysis each)
@fuzz(30)
@given(edits=_edits)
@example(edits={"schedule": {"warmup": -5e15}})  # drawn on a fresh machine by another hypothesis release: a TypeError then
def test_any_manifest_beside_real_traces_analyses_or_fails_in_one_line(run_dir, edits):
    from workbench.pipeline.verdict import analyze_run

    m = json.loads((RUN / "manifest.json").read_text())
    m.update(edits)
    (run_dir / "manifest.json").write_text(json.dumps(m))
    try:
        doc = analyze_run(run_dir).to_json()
    except WorkbenchError as e:
        assert "\n" not in str(e), str(e)
        return
    json.loads(dumps(doc))  # strict JSON
    world = m.get("world_size")
    if isinstance(world, int) and not isinstance(world, bool) and world > 2 and doc["summary"]["per_rank"]:
        assert doc["run"]["partial"]["world_size"] == world, doc["run"].get("partial")
        assert f"of {world} ranks' traces" in doc["verdict"]
