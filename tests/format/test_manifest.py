"""The one manifest reader (workbench/format/manifest.py): whatever ``manifest.json`` holds, ``read`` returns
a dict whose known keys have their types, or raises the one-line ``TraceError``; never anything else."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from workbench.format import manifest
from workbench.format.errors import TraceError

pytestmark = pytest.mark.unit

FUZZ = settings(derandomize=True, max_examples=300, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
                phases=[Phase.explicit, Phase.generate])
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8))
_json = st.recursive(_scalar, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=6), c, max_size=3)),
                     max_leaves=10)
_doc = st.dictionaries(st.sampled_from(sorted(manifest._KEYS) + ["schema_version", "other"]), _json, max_size=8)


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
