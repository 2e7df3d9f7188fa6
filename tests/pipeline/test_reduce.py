"""Per-rank reduction and the analysis cache.

The reference is the analysis as it was before the reduction: every rank's trace in memory and
each frame computed from it when a rule asks (``_direct``). Every committed run (in CI a stable sample: :func:`_ci_sample`) must give the same
``--json`` through the reduced path in this process, on worker processes, and reopened from the
cache, with no frame missing from the summaries (``Context.missed``).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from workbench.pipeline import cache

from workbench.pipeline import reduce
from workbench.load import load_run
from workbench.pipeline.verdict import analyze_run
from tests.conftest import ROOT


def _runs() -> list[Path]:
    out = []
    for base in (ROOT / "traces", ROOT / "traces" / "corpus", ROOT / "tests" / "analysis" / "data"):
        for d in sorted(p for p in base.iterdir() if p.is_dir()):
            if list(d.glob("*.pt.trace.json*")):
                out.append(d)
    return out


def _ci_sample(runs: list[Path]) -> list[Path]:
    """What CI checks (``WORKBENCH_FUZZ=deep``: every run): every multi-rank run, where ranks are reduced
    and merged, and of the single-rank runs the first of each family (its folder and the first word of its
    name: one torchtitan, one Hugging Face Trainer, one engine layout …). ``tests/golden`` still pins every
    run's ``--json``."""
    if os.environ.get("WORKBENCH_FUZZ") == "deep":
        return runs
    seen: set[tuple[str, str]] = set()
    out = []
    for p in runs:
        family = (p.parent.name, p.name.split("_")[0])
        if len(list(p.glob("*.pt.trace.json*"))) > 1 or family not in seen:
            out.append(p)
        seen.add(family)
    return out


RUNS = _runs()
CHECKED = _ci_sample(RUNS)


def _direct(path: Path) -> dict:
    """The analysis with full traces in memory, each frame computed when a rule asks (no
    reduction, no cache)."""
    a = analyze_run(load_run(path))
    assert a.context.undeclared == [], "frames the rules read without declaring them (@reads)"
    return _j(a.to_json())


def _j(doc: dict) -> dict:
    """As ``workbench analyze --json`` prints it."""
    return json.loads(json.dumps(doc, default=str))


def _last_digit(a: float, b: float) -> bool:
    """Rounded values one unit apart in their last printed decimal: a sum in another order landed
    on the other side of the rounding (135.5147 vs 135.5148)."""
    decimals = max(len(repr(float(x)).split(".")[1]) if "e" not in repr(float(x)) else 0 for x in (a, b))
    return 0 < decimals <= 6 and abs(a - b) <= 1.0001 * 10.0 ** -decimals


def same(a, b, where="$"):
    """Equal JSON, floats to 1e-9 relative or one unit in the last rounded decimal (summation
    order differs once kernels are compacted)."""
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), f"{where}: {a!r} vs {b!r}"
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b)) or _last_digit(a, b), \
            f"{where}: {a!r} vs {b!r}"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), f"{where}: keys {sorted(a)} vs {sorted(b) if isinstance(b, dict) else b}"
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{where}: {len(a)} items vs {len(b) if isinstance(b, list) else b}"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


@pytest.fixture
def copy_of(tmp_path, monkeypatch):
    monkeypatch.delenv("WORKBENCH_CACHE_DIR", raising=False)  # these tests check the cache beside the run

    def make(src: Path) -> Path:
        dst = tmp_path / src.name
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns(cache.CACHE_DIR))
        return dst
    return make


@pytest.mark.committed
@pytest.mark.parametrize("src", CHECKED, ids=[f"{p.parent.name}/{p.name}" for p in CHECKED])
def test_summaries_and_cache_give_the_direct_analysis(src, copy_of):
    path = copy_of(src)
    want = _direct(path)
    fresh = analyze_run(path, workers=1, cache=True)
    assert fresh.context.missed == [], "frames the summaries lack (declare them: @reads, verdict.ANALYSIS_READS)"
    same(want, _j(fresh.to_json()))
    assert (path / cache.CACHE_DIR / "index.json").exists()
    again = analyze_run(path, workers=1, cache=True)
    assert again.context.missed == []
    same(want, _j(again.to_json()))


MULTI = [p for p in RUNS if p.name in ("engine_ddp", "engine_zero3", "fault_straggler", "engine_pp_1f1b_m8")]


@pytest.mark.committed
@pytest.mark.parametrize("src", MULTI, ids=[p.name for p in MULTI])
def test_worker_processes_give_the_same_json(src, copy_of):
    path = copy_of(src)
    one = _j(analyze_run(path, workers=1, cache=False).to_json())
    two = _j(analyze_run(path, workers=2, cache=False).to_json())
    same(one, two)
    assert not (path / cache.CACHE_DIR).exists(), "--no-cache wrote a cache"


@pytest.mark.committed
def test_cache_is_recomputed_when_a_trace_changes(copy_of, capsys):
    path = copy_of(ROOT / "traces" / "engine_ddp")
    analyze_run(path, workers=1)
    index = path / cache.CACHE_DIR / "index.json"
    first = index.stat().st_mtime_ns
    trace = sorted(path.glob("rank1.pt.trace.json*"))[0]
    os.utime(trace, ns=(trace.stat().st_atime_ns, trace.stat().st_mtime_ns + 10**9))
    analyze_run(path, workers=1)
    assert index.stat().st_mtime_ns != first, "a changed trace must invalidate the cache"
    # a corrupt cache is a miss with a note, never an error
    index.write_text("{not json")
    a = analyze_run(path, workers=1)
    assert a.verdict and "ignoring an unreadable analysis cache" in capsys.readouterr().err


@pytest.mark.committed
def test_read_only_run_caches_in_the_user_cache_dir(copy_of, tmp_path, monkeypatch):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only directories")
    path = copy_of(ROOT / "traces" / "engine_ddp")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path.chmod(0o555)
    try:
        analyze_run(path, workers=1)
        assert not (path / cache.CACHE_DIR).exists()
        assert list((tmp_path / "xdg" / "workbench").glob("*/index.json"))
    finally:
        path.chmod(0o755)


@pytest.mark.unit
def test_cache_dir_falls_back_when_the_run_is_not_writable(tmp_path, monkeypatch):
    monkeypatch.delenv("WORKBENCH_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(cache.os, "access", lambda p, mode: False)
    d = cache.cache_dir(tmp_path / "run")
    assert d.parent == tmp_path / "xdg" / "workbench"


@pytest.mark.unit
def test_bad_executor_is_one_line():
    from workbench.format.errors import WorkbenchError

    with pytest.raises(WorkbenchError, match="dask://HOST:PORT"):
        reduce.parse_executor("ray://x")


def _cli_json(path: Path, *flags: str) -> dict:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "workbench", "analyze", str(path), "--json", *flags],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.live
def test_cli_reopens_from_the_cached_verdict(copy_of):
    path = copy_of(ROOT / "traces" / "engine_ddp")
    first = _cli_json(path)
    result = path / cache.CACHE_DIR / "analysis.json"
    assert result.exists()
    stamp = result.stat().st_mtime_ns
    assert _cli_json(path) == first and result.stat().st_mtime_ns == stamp, "the second open must read the cache"
    # the verdict also reads the steps CSVs: a changed CSV recomputes it
    csv = path / "steps_rank0.csv"
    os.utime(csv, ns=(csv.stat().st_atime_ns, csv.stat().st_mtime_ns + 10**9))
    assert _cli_json(path) == first and result.stat().st_mtime_ns != stamp
    assert _cli_json(path, "--no-cache") == first
