"""The frame registry: frames named once, picklable by reference, declared by the rules
that read them; reduce computes exactly the declared set."""

from __future__ import annotations

import importlib
import pickle
from pathlib import Path

import pytest

import workbench
from tests.conftest import TRACES
from workbench.analysis import frames
from workbench.analysis.frames import Frame
from workbench.diagnose import READS as RULE_READS, RULES, Context, diagnose
from workbench.diagnose.base import reads
from workbench.load import load_run
from workbench.pipeline.verdict import ANALYSIS_READS, READS, analyze_run

def all_frames() -> list[tuple[str, str, Frame]]:
    """(module, attribute, Frame) of every Frame a module of the analysis path defines."""
    root = Path(workbench.__file__).parent
    out = []
    for f in sorted([*root.glob("analysis/*.py"), *root.glob("diagnose/**/*.py"), root / "pipeline" / "verdict.py"]):
        name = ".".join(f.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
        mod = importlib.import_module(name)
        out += [(name, k, v) for k, v in vars(mod).items() if isinstance(v, Frame)]
    return out


@pytest.mark.unit
def test_every_frame_has_one_name():
    by_name: dict[str, set[int]] = {}
    for _, _, f in all_frames():
        by_name.setdefault(f.name, set()).add(id(f))
    assert {n: len(ids) for n, ids in by_name.items() if len(ids) > 1} == {}
    assert {f.name for f in READS} <= set(by_name)


@pytest.mark.unit
def test_the_declared_set_is_what_the_rules_and_the_json_read():
    assert [f.name for f in READS] == list(dict.fromkeys(f.name for f in (*ANALYSIS_READS, *RULE_READS)))
    for rule in RULES:
        assert hasattr(rule, "reads"), f"{rule.__name__} does not declare the frames it reads (@reads)"
    with pytest.raises(ValueError, match="two frames named"):
        frames.unique([frames.WINDOWS, Frame("windows", frames.WINDOWS.fn)])


@pytest.mark.unit
@pytest.mark.parametrize("frame", READS, ids=[f.name for f in READS])
def test_frames_travel_by_reference(frame):
    """Worker processes and Dask receive frames pickled: their functions must be importable."""
    back = pickle.loads(pickle.dumps(frame))
    assert back.name == frame.name and back.returns == frame.returns


@pytest.mark.committed
def test_reduce_computes_exactly_the_declared_frames():
    a = analyze_run(TRACES / "engine_ddp", workers=1, cache=False)
    for r in a.context.ranks:
        assert set(a.run.ranks[r].summary.frames) == {f.name for f in READS}


def _undeclared_frame_reader(ctx):
    ctx.frame(frames.DEVICE_BUSY, next(iter(ctx.ranks)))


@pytest.mark.committed
def test_a_frame_read_but_not_declared_is_named():
    run = load_run(TRACES / "engine_ddp")
    ctx = Context.of_traces(run.traces)
    for rule in (reads()(_undeclared_frame_reader), reads(frames.DEVICE_BUSY)(lambda c: _undeclared_frame_reader(c))):
        with ctx.reading(rule):
            rule(ctx)
    assert ctx.undeclared == [("_undeclared_frame_reader", "device_busy")]
    # the rules run on a context without the undeclared reader: nothing is named there
    fresh = Context.of_traces(run.traces)
    found = diagnose(ctx.breakdown, None, fresh)
    assert isinstance(found, list) and fresh.undeclared == []
