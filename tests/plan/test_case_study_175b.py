"""case_studies/plan_175b: the committed results are what the script computes now, and RESULTS.md
shows them."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.unit

DIR = ROOT / "case_studies" / "plan_175b"


def _script():
    spec = importlib.util.spec_from_file_location("plan_175b", DIR / "plan_175b.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_results_are_current_and_shown():
    mod = _script()
    res = mod.results()
    assert res == json.loads((DIR / "results.json").read_text())
    table = mod.markdown(res)
    assert all(line in (DIR / "RESULTS.md").read_text() for line in table.splitlines())
    big = next(r for r in res if r["global_batch"] == 8192 and r["inter_node_gbps"] == 400)
    assert big["article"]["short"].startswith("tp8 pp16 dp64") and big["article"]["fits"]
    assert big["best"]["step_s"] <= big["article_best_variant"]["step_s"] <= big["article"]["step_s"]
