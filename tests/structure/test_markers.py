"""Every test is marked exactly one of ``unit`` / ``committed`` / ``live`` (pyproject.toml says what
each selects), so ``pytest -m unit`` is the quick loop and ``-m "not live"`` needs no process."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import COLLECTED, KINDS, ROOT, misclassified, misclassified_in_session, run


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


def whole_tree_collected(config) -> bool:
    """Did this session collect every test of the tree (``pytest`` or ``pytest tests``, whatever
    ``-m`` or ``-k`` then deselect)? Each pytest-xdist worker collects the whole tree too."""
    tests = (ROOT / "tests").resolve()
    args = [Path(a.split("::")[0]).resolve() for a in config.args] or [tests]
    return all(a in (tests, ROOT.resolve()) for a in args)


@pytest.mark.slow  # the in-session check above covers CI's fast subset, which collects the whole tree
@pytest.mark.live
def test_every_test_of_the_suite_has_one_kind(request):
    """The whole tree, whatever this session collected: none is left by ``-m "not unit and not
    committed and not live"``. Where this session collected the whole tree (CI's ``make test``) its
    own collection answers; else a collection of its own (~15 s on two cores)."""
    if whole_tree_collected(request.config):
        collected = request.config.stash.get(COLLECTED, 0)
        assert collected > 1000 and not misclassified_in_session(request.config), misclassified_in_session(request.config)
        return
    r = run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
             "-m", "not unit and not committed and not live", str(ROOT / "tests")], timeout=300)
    assert r.returncode == 5, r.stdout[-3000:] + r.stderr[-3000:]  # 5: no test selected
    assert "deselected" in r.stdout.splitlines()[-1], r.stdout[-3000:]
