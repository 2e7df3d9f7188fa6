"""Public training scripts nobody here wrote, run unmodified under ``workbench profile``
(benchmarks/corpus.py holds the table: repo, path, commit, command, expected verdict).

Their trimmed run directories are committed under traces/corpus/; these tests analyse each one
as ``workbench analyze`` would and hold it to its table row: no crash, the world size it ran
with, the step source it was cut by, the diagnoses expected present and absent. No process is
started: the runs were made by ``python -m benchmarks.corpus run``.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from tests.conftest import ROOT, TRACES
from workbench.format.errors import TraceError, WorkbenchError
from workbench.pipeline.verdict import analyze_run

CORPUS_RUNS = TRACES / "corpus"


def _table():
    spec = importlib.util.spec_from_file_location("corpus_table", ROOT / "benchmarks" / "corpus.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


TABLE = _table()
COMMITTED = sorted(p.name for p in CORPUS_RUNS.iterdir() if (p / "manifest.json").exists()) if CORPUS_RUNS.is_dir() else []


def _entry(name):
    return TABLE.BY_NAME[name]


@pytest.mark.unit
def test_corpus_covers_the_required_kinds_of_script():
    """At least 8 public scripts, from more than one project, on both machines."""
    assert len(TABLE.ENTRIES) >= 8
    assert {e.repo for e in TABLE.ENTRIES} >= {"pytorch/examples", "Lightning-AI/pytorch-lightning",
                                               "huggingface/transformers", "huggingface/pytorch-image-models"}
    assert {e.kind for e in TABLE.ENTRIES} == {"cpu", "gpu"}
    for e in TABLE.ENTRIES:
        assert len(e.commit) == 40 and e.why, e.name


@pytest.mark.committed
def test_every_committed_run_is_in_the_table_and_the_readme():
    readme = (TRACES / "README.md").read_text()
    assert COMMITTED, "no run under traces/corpus/"
    for name in COMMITTED:
        assert name in TABLE.BY_NAME, name
        assert f"`corpus/{name}`" in readme, name


@pytest.mark.unit
def test_commands_run_the_script_unmodified_under_workbench_profile():
    e = _entry("word_lm_cpu")
    cmd = TABLE.command(e, ROOT / "runs" / "x")
    assert cmd[1:5] == ["-m", "workbench", "profile", "--stop-after-profile"]
    assert cmd[-len(e.args) - 1:] == ["main.py", *e.args]
    ddp = TABLE.command(_entry("hf_trainer_ddp_cpu"), ROOT / "runs" / "x")
    assert ddp[ddp.index("--nproc-per-node") + 1] == "2"


@pytest.mark.committed
@pytest.mark.parametrize("name", COMMITTED)
def test_committed_run_matches_its_row(name):
    e = _entry(name)
    run_dir = CORPUS_RUNS / name
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["world_size"] == e.ranks
    statuses = [json.loads(f.read_text()) for f in sorted(run_dir.glob("status_rank*.json"))]
    assert len(statuses) == e.ranks
    assert {s.get("steps_from") for s in statuses} == {e.steps_from}, statuses
    if not e.traced:
        # No profiler window completed: analysis refuses the run in one line instead of crashing.
        with pytest.raises((TraceError, WorkbenchError), match="no trace"):
            analyze_run(run_dir)
        return
    a = analyze_run(run_dir)
    assert not a.breakdown.empty and a.breakdown["step_ms"].gt(0).all()
    assert sorted(a.per_rank["rank"].unique().tolist()) == list(range(e.ranks))
    ids = {d.id for d in a.diagnoses}
    for want in e.expect:
        assert want in ids, (name, sorted(ids))
    for unwanted in e.expect_absent:
        assert unwanted not in ids, (name, sorted(ids))


@pytest.mark.committed
def test_committed_runs_carry_no_machine_paths():
    """Fixtures are shared as they are: no absolute path of the machine that made them."""
    import gzip
    import re

    machine = re.compile(r"(/work/|/root/|/home/|/tmp/)")
    for run in COMMITTED:
        for f in (CORPUS_RUNS / run).iterdir():
            if not f.is_file():
                continue
            text = gzip.open(f, "rt", errors="replace").read() if f.suffix == ".gz" else f.read_text(errors="replace")
            assert not machine.search(text), f"{f.relative_to(ROOT)}: {machine.search(text).group(0)}…"


@pytest.mark.unit
def test_trim_keeps_the_expert_load_whole_and_the_step_rows_short(tmp_path):
    """A trimmed fixture's expert load is every (step, layer, expert) row the capture wrote: a cut one
    changes the diagnosis (a layer's max/mean from a part of its experts)."""
    run = tmp_path / "runs" / "x"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text("{}")
    rows = "".join(f"2,model.layers.{i // 64}.mlp.gate,{i % 64},{i}\n" for i in range(128))
    (run / "experts_rank0.csv").write_text("step,layer,expert,tokens\n" + rows)
    (run / "steps_rank0.csv").write_text("step,step_ms\n" + "".join(f"{i},1.0\n" for i in range(100)))
    TABLE.trim(tmp_path / "runs", tmp_path / "out")
    assert (tmp_path / "out" / "x" / "experts_rank0.csv").read_text() == (run / "experts_rank0.csv").read_text()
    assert len((tmp_path / "out" / "x" / "steps_rank0.csv").read_text().splitlines()) == TABLE.KEEP_CSV_ROWS + 1
