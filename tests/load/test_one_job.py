"""Traces of different jobs in one directory: the consistent set is analysed, the rest set aside.

Fixtures are committed real traces copied into tmp_path; where one signal must be isolated, a
copy of rank 1 of ``engine_ddp`` (the same job as its rank 0, so otherwise consistent) gets one
targeted edit of its header, pids or clock.
"""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from tests.conftest import TRACES, workbench
from workbench.format.errors import WorkbenchError
from workbench.load import load_run
from workbench.load.jobs import CLOCK_TOLERANCE_S
from workbench.pipeline.verdict import analyze_run


def copy(tmp_path, run: str, rank: int, name: str | None = None):
    dst = tmp_path / (name or f"{run}_rank{rank}.pt.trace.json.gz")
    shutil.copy(TRACES / run / f"rank{rank}.pt.trace.json.gz", dst)
    return dst


def edited(tmp_path, run: str, rank: int, name: str, old: bytes = b"", new: bytes = b"", count: int = 1):
    """A copy of a committed trace with ``old`` replaced by ``new`` in its JSON text (``count``
    times; -1: all). The text stays in Kineto's layout, so it is read as written traces are."""
    text = gzip.decompress((TRACES / run / f"rank{rank}.pt.trace.json.gz").read_bytes())
    if old:
        assert old in text, old
    dst = tmp_path / name
    dst.write_bytes(gzip.compress(text.replace(old, new, count) if old else text, compresslevel=1))
    return dst


def set_aside_warnings(run) -> list[str]:
    return [w for w in run.warnings if w.startswith("set aside")]


@pytest.mark.committed
def test_two_jobs_one_rank_each_are_not_merged(tmp_path):
    # rank 0 of engine_ddp and rank 1 of ddp_slow_data: same world size, backend and process
    # groups, recorded ~11 minutes apart. Merged, rank 1 "works 5.6× the others".
    copy(tmp_path, "engine_ddp", 0)
    other = copy(tmp_path, "ddp_slow_data", 1)
    run = load_run(tmp_path)
    assert run.set_aside == [other]
    [w] = set_aside_warnings(run)
    assert other.name in w and "min before" in w and "\n" not in w
    a = analyze_run(run)
    assert list(a.per_rank["rank"]) == [0]
    assert "straggler_rank" not in {d.id for d in a.diagnoses}


@pytest.mark.committed
@pytest.mark.slow  # reads the 370M GPU trace and analyses the run: ~2.5 s here
def test_a_world_size_1_trace_among_a_2_rank_job(tmp_path):
    copy(tmp_path, "engine_ddp", 0)
    copy(tmp_path, "engine_ddp", 1)
    single = copy(tmp_path, "gpu_fsdp2_370m", 0)
    run = load_run(tmp_path)
    assert run.set_aside == [single] and sorted(run.traces) == [0, 1]
    assert all(t.path.parent == tmp_path and "engine_ddp" in t.path.name for t in run.traces.values())
    [w] = set_aside_warnings(run)
    assert single.name in w
    a = analyze_run(run)
    assert sorted(a.per_rank["rank"]) == [0, 1] and "straggler_rank" not in {d.id for d in a.diagnoses}


BASE = b'"baseTimeNanoseconds": 1790857026000000000'
PID = b'"pid": 15821'  # engine_ddp rank 1's process


def later(seconds: float) -> bytes:
    return b'"baseTimeNanoseconds": %d' % (1790857026000000000 + int(seconds * 1e9))


@pytest.mark.committed
@pytest.mark.parametrize("old,new,why", [
    (b'"world_size": 2', b'"world_size": 4', "world size 4"),
    (b'"backend": "gloo"', b'"backend": "nccl"', "backend nccl"),
    (b'"pg_size": 2, "ranks": [0, 1]', b'"pg_size": 3, "ranks": [0, 1, 2]', "process group 0 is 3 ranks"),
    # rank 0 is in group "7", which rank 0's trace does not list
    (b'"pg_name": "0"', b'"pg_name": "7"', "process group 7 with rank 0"),
    (BASE, later(3600), "60 min after"),
], ids=["world_size", "backend", "pg_ranks", "pg_missing", "hour_later"])
def test_one_inconsistency_sets_the_trace_aside(tmp_path, old, new, why):
    copy(tmp_path, "engine_ddp", 0)
    bad = edited(tmp_path, "engine_ddp", 1, "x.pt.trace.json.gz", old, new)
    run = load_run(tmp_path)
    assert run.set_aside == [bad], run.warnings
    [w] = set_aside_warnings(run)
    assert f"{bad.name} (" in w and why in w, w
    assert list(run.traces) == [0]


@pytest.mark.committed
def test_the_unedited_copy_is_kept(tmp_path):
    # the control for the edits above: rewriting the JSON alone changes nothing
    copy(tmp_path, "engine_ddp", 0)
    edited(tmp_path, "engine_ddp", 1, "x.pt.trace.json.gz")
    run = load_run(tmp_path)
    assert run.set_aside == [] and list(run.traces) == [0, 1] and not set_aside_warnings(run)


@pytest.mark.committed
def test_a_shift_within_the_clock_tolerance_is_kept(tmp_path):
    copy(tmp_path, "engine_ddp", 0)
    span_s = 0.07  # engine_ddp's traces span ~60 ms; shift rank 1 to just inside the tolerance
    edited(tmp_path, "engine_ddp", 1, "x.pt.trace.json.gz", BASE, later(span_s + 0.9 * CLOCK_TOLERANCE_S))
    assert load_run(tmp_path).set_aside == []


@pytest.mark.committed
def test_same_rank_from_two_processes_is_two_jobs(tmp_path):
    # the same recording under another pid: one rank claimed by two processes at once
    copy(tmp_path, "engine_ddp", 0)
    copy(tmp_path, "engine_ddp", 1)
    twin = edited(tmp_path, "engine_ddp", 1, "twin.pt.trace.json.gz", PID, b'"pid": 999999', -1)
    run = load_run(tmp_path)
    assert len(run.set_aside) == 1 and sorted(run.traces) == [0, 1], run.warnings
    [w] = set_aside_warnings(run)
    assert "rank 1 again, from another process" in w
    assert not any("several traces" in w for w in run.warnings)
    assert twin.exists()


@pytest.mark.committed
def test_cycles_of_one_process_keep_the_newest(tmp_path):
    # tensorboard_trace_handler writes a file per cycle, same pid: the newest cycle of each rank wins
    for r in (0, 1):
        copy(tmp_path, "engine_ddp", r, f"vm_{r}.1.pt.trace.json.gz")
        # sorts first, recorded 30 s later
        edited(tmp_path, "engine_ddp", r, f"vm_{r}.0.pt.trace.json.gz", BASE, later(30))
    run = load_run(tmp_path)
    assert run.set_aside == []
    assert {t.path.name for t in run.traces.values()} == {"vm_0.0.pt.trace.json.gz", "vm_1.0.pt.trace.json.gz"}
    assert sorted(w for w in run.warnings if "several traces" in w) == [
        "rank 0 has several traces; using vm_0.0.pt.trace.json.gz", "rank 1 has several traces; using vm_1.0.pt.trace.json.gz"]


@pytest.mark.committed
def test_the_larger_job_wins(tmp_path):
    copy(tmp_path, "gpu_fsdp2_370m", 0, "a.pt.trace.json.gz")  # rank 0 of a world-size-1 job, newer
    copy(tmp_path, "ddp_slow_data", 0)
    copy(tmp_path, "ddp_slow_data", 1)
    run = load_run(tmp_path)
    assert [p.name for p in run.set_aside] == ["a.pt.trace.json.gz"]
    assert all("ddp_slow_data" in t.path.name for t in run.traces.values())


MULTI_RANK = sorted(d.name for d in TRACES.iterdir() if len(list(d.glob("rank*.pt.trace.json.gz"))) > 1)


@pytest.mark.committed
@pytest.mark.slow  # parses every committed run: ~9 s here
def test_every_committed_multi_rank_run_is_one_job():
    assert len(MULTI_RANK) >= 10
    for name in MULTI_RANK:
        run = load_run(TRACES / name)
        assert run.set_aside == [] and not set_aside_warnings(run), (name, run.warnings)
        assert len(run.traces) == run.world_size > 1, name


@pytest.mark.committed
def test_manifest_run_directory_sets_aside_a_foreign_trace(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(TRACES / "engine_ddp", d)
    stray = copy(d, "ddp_slow_data", 1, "old.pt.trace.json.gz")
    run = load_run(d)
    assert run.set_aside == [stray] and sorted(run.traces) == [0, 1]
    assert all(t.path.name.startswith("rank") for t in run.traces.values())
    [w] = set_aside_warnings(run)
    assert "old.pt.trace.json.gz (" in w and "before the run started" in w


@pytest.mark.committed
def test_manifest_world_size_disagrees(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(TRACES / "engine_ddp", d)
    m = json.loads((d / "manifest.json").read_text())
    (d / "manifest.json").write_text(json.dumps(dict(m, world_size=4)))
    with pytest.raises(WorkbenchError) as e:
        load_run(d)
    assert "world size 2, the manifest says 4" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.committed
def test_no_trace_of_the_manifest_job_is_an_error(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(TRACES / "engine_ddp" / "manifest.json", d)
    for r in (0, 1):
        copy(d, "ddp_slow_data", r, f"rank{r}.pt.trace.json.gz")
    with pytest.raises(WorkbenchError) as e:
        load_run(d)
    assert "rank0.pt.trace.json.gz" in str(e.value) and "before the run started" in str(e.value)


@pytest.mark.live
@pytest.mark.slow
def test_cli_on_a_mix_warns_and_exits_0(tmp_path):
    copy(tmp_path, "engine_ddp", 0)
    other = copy(tmp_path, "ddp_slow_data", 1)
    r = workbench("analyze", tmp_path)
    out = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 0, out
    assert "warning: set aside 1 trace" in out and other.name in out
    assert "straggler_rank" not in out
