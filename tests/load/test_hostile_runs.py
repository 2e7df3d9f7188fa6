"""The committed runs damaged file by file and field by field (tests/hostile_runs.py): every case ends in a
result or one clear line with exit 2, within 30 s, with no traceback, no raw control character, no impossible
figure stated as fact; a failed run is never called healthy; a NaN loss is named. CI runs a stable sample of
the generated cases (``WORKBENCH_FUZZ=deep``: all of them)."""

from __future__ import annotations

import os

import pytest

from tests import hostile_runs as hr

pytestmark = pytest.mark.committed


@pytest.fixture(scope="module")
def source_cache(tmp_path_factory):
    """The sources copied and analysed once (their per-rank frames cached beside them), for every case."""
    saved = os.environ.pop("WORKBENCH_CACHE_DIR", None)  # each copy's cache travels with it
    yield tmp_path_factory.mktemp("sources")
    if saved is not None:
        os.environ["WORKBENCH_CACHE_DIR"] = saved


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=[pytest.mark.slow] if c.klass == "failure text" else [])
                                  for c in hr.ci_cases()])
def test_damaged_run(tmp_path, source_cache, case):
    v = hr.observe(case, tmp_path, source_cache)
    assert v.problem is None, (case.what, v.problem, v.outputs)
