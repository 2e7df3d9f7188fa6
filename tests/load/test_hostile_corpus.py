"""Every case of the generated hostile corpus (tests/hostile_corpus.py): no traceback, no hang, no
silent nonsense, peak RSS under 2 GB. Cases that take more than a few seconds are ``slow``."""

from __future__ import annotations

import pytest

from tests import hostile_corpus as hc

pytestmark = pytest.mark.live


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=[pytest.mark.slow] if c.slow else []) for c in hc.CASES])
def test_hostile_case(tmp_path, case):
    o = hc.observed(case, tmp_path)
    assert o.problem is None, (case.name, o)
