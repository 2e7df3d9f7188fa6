"""Every test is marked exactly one of ``unit`` / ``committed`` / ``live`` (pyproject.toml says what
each selects), so ``pytest -m unit`` is the quick loop and ``-m "not live"`` needs no process."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from tests.conftest import KINDS, ROOT, misclassified, misclassified_in_session, run


def _item(nodeid: str, *marks: str):
    return SimpleNamespace(nodeid=nodeid, iter_markers=lambda: [SimpleNamespace(name=m) for m in marks])


@pytest.mark.unit
def test_the_check_names_a_test_with_no_kind_or_two():
    items = [_item("a.py::ok", "unit"), _item("a.py::slow_ok", "slow", "live"), _item("a.py::none", "slow"),
             _item("a.py::two", "unit", "committed")]
    assert misclassified(items) == ["a.py::none: none", "a.py::two: committed, unit"]


@pytest.mark.unit
def test_every_test_collected_in_this_session_has_one_kind(request):
    bad = misclassified_in_session(request.config)
    assert not bad, f"mark each with exactly one of {KINDS} (pyproject.toml):\n" + "\n".join(bad)


@pytest.mark.slow  # the in-session check above covers CI's fast subset, which collects the whole tree
@pytest.mark.live
def test_every_test_of_the_suite_has_one_kind():
    """The whole tree, whatever this session collected: none is left by ``-m "not unit and not
    committed and not live"`` (collection only, ~15 s on two cores)."""
    r = run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
             "-m", "not unit and not committed and not live", str(ROOT / "tests")], timeout=300)
    assert r.returncode == 5, r.stdout[-3000:] + r.stderr[-3000:]  # 5: no test selected
    assert "deselected" in r.stdout.splitlines()[-1], r.stdout[-3000:]
