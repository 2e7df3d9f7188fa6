"""The benchmarks' shared helpers: one measurement of a whole process tree, one
builder of synthetic traces, and scripts that import them as a package."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from benchmarks.measure import measure, measure_ok
from benchmarks.synthetic import build, minify, source_file
from tests.conftest import ROOT, TRACES
from workbench.analysis.steps import step_windows
from workbench.load.trace import read_trace

# a parent that starts N children, each holding 60 MB while the others do
CHILDREN = r"""
import subprocess, sys
hold = "import time; b = bytearray(60 << 20); time.sleep(1.5)"
ps = [subprocess.Popen([sys.executable, "-c", hold]) for _ in range(int(sys.argv[1]))]
print(sum(p.wait() for p in ps))
"""


@pytest.mark.live
def test_memory_is_summed_over_the_process_tree():
    one, out1 = measure_ok([sys.executable, "-c", CHILDREN, "1"])
    three, out3 = measure_ok([sys.executable, "-c", CHILDREN, "3"])
    assert out1.strip() == out3.strip() == "0" and three["max_procs"] >= 4
    # two more workers: ~120 MB more in the tree's sum, nothing more in GNU time's number (the
    # largest single process; it also holds the size of the process that started the command, as
    # ru_maxrss survives fork and exec: under pytest, ~1.3 GB)
    assert three["tree_rss"] - one["tree_rss"] >= 100 << 20, (one, three)
    assert abs(three["max_proc_rss"] - one["max_proc_rss"]) < 20 << 20, (one, three)
    assert three["wall_s"] >= 1.5 and three["cpu_s"] > 0


@pytest.mark.live
def test_a_failure_or_a_timeout_is_a_status():
    assert measure([sys.executable, "-c", "raise SystemExit(3)"])["status"] == "failed"
    assert measure([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.5)["status"] == "timeout"


@pytest.mark.committed
def test_a_built_trace_replicates_the_steps_in_both_layouts(tmp_path):
    src = source_file(TRACES / "gpu_fixed_data")
    one = read_trace(src)
    out, n_events, n_steps = build(src, tmp_path, min_events=3 * one.n_events, min_mb=0)
    big = read_trace(out)
    assert len(step_windows(big)) == n_steps >= 3 * len(step_windows(one)) // 2
    mini = tmp_path / "mini.pt.trace.json"
    minify(out, mini)
    assert mini.stat().st_size < out.stat().st_size and read_trace(mini).n_events == big.n_events


@pytest.mark.unit
def test_benchmark_scripts_import_the_helpers_as_a_package():
    for f in sorted((ROOT / "benchmarks").glob("*.py")):
        tree = ast.parse(f.read_text())
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "insert"
                 and isinstance(n.value, ast.Attribute) and n.value.attr == "path"]
        assert not calls, f"{f.name} edits sys.path: import benchmarks.* instead (python -m benchmarks.{f.stem})"
        local = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
                 and (ROOT / "benchmarks" / f"{n.module}.py").exists()]
        assert not local, f"{f.name} imports {local} as top-level modules"
    assert Path(measure.__code__.co_filename).parent == ROOT / "benchmarks"


@pytest.mark.live
def test_the_floor_decodes_every_event_of_one_trace_and_of_many(tmp_path):
    """benchmarks/floor.py's floor: one typed decode of each file (over a process pool for several)."""
    import gzip
    import json
    import subprocess

    from benchmarks.floor import FLOOR_SCRIPT

    script = tmp_path / "floor.py"
    script.write_text(FLOOR_SCRIPT)
    f = TRACES / "gpu_fixed_data" / "rank0.pt.trace.json.gz"
    n = len(json.loads(gzip.decompress(f.read_bytes()))["traceEvents"])
    one = subprocess.run([sys.executable, str(script), str(f)], capture_output=True, text=True, check=True)
    two = subprocess.run([sys.executable, str(script), str(f), str(f)], capture_output=True, text=True, check=True)
    assert int(one.stdout) == n and int(two.stdout) == 2 * n
