"""The one manifest reader (workbench/format/manifest.py): whatever ``manifest.json`` holds, ``read`` returns
a dict whose known keys have their types, or raises the one-line ``TraceError``; never anything else."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzzing import fuzz
from workbench.format import manifest
from workbench.format.errors import TraceError

pytestmark = pytest.mark.unit

FUZZ = fuzz(300)
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8))
_json = st.recursive(_scalar, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=6), c, max_size=3)),
                     max_leaves=10)
_counts = st.dictionaries(st.sampled_from(sorted({k for _, k in manifest._NESTED}) + ["other"]), _scalar, max_size=4)
_doc = st.dictionaries(st.sampled_from(sorted(manifest._KEYS) + ["schema_version", "other"]), _json | _counts, max_size=8)


def _check(tmp_path, data: bytes):
    (tmp_path / "manifest.json").write_bytes(data)
    try:
        m, notes = manifest.read(tmp_path)
    except TraceError as e:
        assert "\n" not in str(e)
        return
    assert isinstance(m, dict) and all(isinstance(n, str) and "\n" not in n for n in notes)
    for key, (_, ok) in manifest._KEYS.items():
        assert key not in m or ok(m[key]), (key, m[key])
    for (outer, key), (_, ok) in manifest._NESTED.items():
        assert key not in (m.get(outer) or {}) or ok(m[outer][key]), (outer, key, m[outer][key])
    assert m.get("schema_version") is None or isinstance(m["schema_version"], int)


@FUZZ
@given(doc=_doc)
def test_mistyped_manifests_read_or_fail_in_one_line(tmp_path, doc):
    _check(tmp_path, json.dumps(doc).encode())


@FUZZ
@given(data=st.binary(max_size=200))
def test_any_bytes_read_or_fail_in_one_line(tmp_path, data):
    _check(tmp_path, data)


@pytest.mark.parametrize("depth", [10, 64, 65, 1000, 100_000])
def test_depth_is_bounded_without_recursion(tmp_path, depth):
    (tmp_path / "manifest.json").write_text('{"a": ' + "[" * depth + "]" * depth + "}")
    if depth + 1 <= manifest.MAX_DEPTH:
        assert manifest.read_manifest(tmp_path) == {"a": json.loads("[" * depth + "]" * depth)}
    else:
        with pytest.raises(TraceError, match="nested more than 64"):
            manifest.read(tmp_path)


def test_json_depth_ignores_brackets_in_strings():
    assert manifest.json_depth('{"a": "[[[[{{{{", "b": [1, {"c": "\\\\"}]}') == 3


@pytest.mark.parametrize("value", [-5e15, -1, 2.5, "3", True, 10**12, float("inf")])
def test_a_schedule_count_that_is_no_count_is_left_out_in_one_line(tmp_path, value):
    (tmp_path / "manifest.json").write_text(json.dumps({"schedule": {"wait": 1, "warmup": value, "active": 3}}))
    m, notes = manifest.read(tmp_path)
    assert m["schedule"] == {"wait": 1, "active": 3}
    assert len(notes) == 1 and notes[0].startswith("manifest.json: schedule.warmup is ") and "left out" in notes[0]


def test_counts_in_range_are_kept(tmp_path):
    doc = {"world_size": 8, "schedule": {"wait": 0, "warmup": 1, "active": 3}, "capture_overhead": {"export_ms": 12.5}}
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    assert manifest.read(tmp_path) == (doc, [])


def test_a_world_size_no_machine_runs_is_left_out(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"world_size": 10**12}))
    m, notes = manifest.read(tmp_path)
    assert "world_size" not in m and "world_size is 1000000000000" in notes[0]
