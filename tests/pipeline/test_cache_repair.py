"""A cache that lost or garbled a frame is repaired from the trace, never a traceback.

Each rank's frames are cached in RUN/.workbench-cache (index.json: small frames as JSON under
``json``, tables under ``tables``). Deleting one frame kind from every rank, or garbling it, must
give the same ``--json`` as a fresh analysis: the frame is computed again from the rank's trace.
Without the repair, deleting ``saved:unfused_optimizer`` would raise ``AttributeError: 'RankSummary'
object has no attribute 'events'`` (the rule's fallback handed a summary where it expected a
trace), deleting ``efficiency_in_steps`` a KeyError, and a garbled ``memory_summary`` a TypeError.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.pipeline.test_reduce import same
from workbench.pipeline.cache import _digest, cache_dir
from workbench.pipeline.verdict import READS, analyze_run
from tests.conftest import ROOT

# a GPU run with an unfused optimizer (every efficiency frame holds something) and a CPU
# pipeline run of two ranks (collectives, point-to-point, pipeline actions)
RUNS = {"gpu": ROOT / "tests" / "analysis" / "data" / "eff_gpt_forloop", "cpu": ROOT / "traces" / "engine_pp_1f1b_m8"}


def _j(doc: dict) -> dict:
    return json.loads(json.dumps(doc, default=str))


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    """(run copy, its cache's index.json text, the fresh --json) per kind of run."""
    out = {}
    for kind, src in RUNS.items():
        dst = tmp_path_factory.mktemp(kind) / src.name
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".workbench-cache"))
        want = _j(analyze_run(dst, workers=1).to_json())
        out[kind] = (dst, (cache_dir(dst) / "index.json").read_text(), want)
    return out


def _edit(path: Path, index: str, fn, sign: bool = True) -> None:
    """Apply ``fn`` to every rank's index entry. ``sign``: store the edited body's digest too, as a
    writer of another layout would, so that what is checked behind the digest (each frame reads
    back as its type) is what the test reaches; unsigned, the digest alone refuses the edit."""
    doc = json.loads(index)
    for r in doc["ranks"]:
        fn(r)
    if sign:
        doc["digest"] = _digest({k: doc[k] for k in ("tables", "ranks")})
    (cache_dir(path) / "index.json").write_text(json.dumps(doc))
    (cache_dir(path) / "analysis.json").unlink(missing_ok=True)


def _drop(name):
    def fn(r):
        r["json"].pop(name, None)
        for t in [t for t in r["tables"] if t == name or t.startswith(name + ".")]:
            del r["tables"][t]
    return fn


NAMES = [f.name for f in READS]


@pytest.mark.unit
def test_every_frame_kind_of_the_old_cache_is_still_a_frame():
    """The frame kinds older caches held (windows and breakdown were "__windows" and
    "__breakdown"; has_gpu is the trace's metadata now) are all in the registry."""
    old = {"collective_calls", "comm_overlap", "device_busy", "efficiency", "efficiency_in_steps", "fsdp_annotated",
           "graph_launches", "has_collectives", "inventory", "memory_summary", "pageable", "pipeline_stage", "pp_bubble",
           "saved:attention_math", "saved:fp32_matmul", "saved:layout_conversion", "saved:stale_gemm_kernels",
           "saved:unfused_elementwise", "saved:unfused_optimizer", "sync_gaps", "windows", "breakdown"}
    assert old <= set(NAMES)


@pytest.mark.committed
@pytest.mark.parametrize("kind", sorted(RUNS))
@pytest.mark.parametrize("name", NAMES)
def test_a_deleted_frame_is_recomputed(cached, kind, name, capsys):
    path, index, want = cached[kind]
    _edit(path, index, _drop(name))
    same(want, _j(analyze_run(path, workers=1).to_json()))
    assert f"no frame {name}" in capsys.readouterr().err


@pytest.mark.committed
@pytest.mark.parametrize("kind", sorted(RUNS))
def test_garbled_frames_are_recomputed(cached, kind, capsys):
    """Every JSON frame replaced by a value of the wrong shape: recomputed, with one note."""
    path, index, want = cached[kind]

    def garble(r):
        for k in r["json"]:
            r["json"][k] = "garbled"
    _edit(path, index, garble)
    same(want, _j(analyze_run(path, workers=1).to_json()))
    assert "ignoring an unreadable analysis cache" in capsys.readouterr().err


@pytest.mark.committed
@pytest.mark.parametrize("kind", sorted(RUNS))
def test_a_truncated_table_is_recomputed(cached, kind, capsys):
    """A Parquet file cut short (a disk that filled while writing): recomputed, with one note."""
    path, index, want = cached[kind]
    _edit(path, index, lambda r: None)
    table = sorted(cache_dir(path).glob("t*.parquet"))[0]
    table.write_bytes(table.read_bytes()[:100])
    same(want, _j(analyze_run(path, workers=1).to_json()))
    assert "ignoring an unreadable analysis cache" in capsys.readouterr().err


def _kernel_count(rf):
    """A frame no rule declares (module-level: frames travel by reference)."""
    return int(rf.trace.events["is_gpu"].sum())


@pytest.mark.committed
def test_a_frame_the_summaries_lack_is_computed_from_the_trace(cached):
    """Rules and pages may ask for any frame: one the summaries do not hold is computed from the
    rank's trace, read again (``Context.missed`` says which), with the frames it needs computed
    there too, never from the summaries' compacted ones."""
    from workbench.analysis.frames import Frame
    from workbench.diagnose.efficiency import EFFICIENCY_IN_STEPS
    from workbench.diagnose.rules.unfused_optimizer import SAVED_OPTIMIZER

    path, _, want = cached["gpu"]
    a = analyze_run(path, workers=1)
    assert a.context.missed == []
    extra = Frame("test:kernel_count", _kernel_count, returns=int)
    assert a.context.frame(extra, 0) == int(a.run.trace(0).events["is_gpu"].sum())
    rf = a.context.ranks[0]
    kept = rf.summary(SAVED_OPTIMIZER)
    for f in (SAVED_OPTIMIZER, EFFICIENCY_IN_STEPS):
        del rf._values[f.name]  # as if the summaries lacked them
    assert list(rf.summary(SAVED_OPTIMIZER)) == list(kept)  # a tuple fresh, a list from the JSON cache
    assert sorted(a.context.missed) == [("saved:unfused_optimizer", 0), ("test:kernel_count", 0)]


@pytest.mark.committed
@pytest.mark.parametrize("kind", sorted(RUNS))
def test_an_index_edited_by_hand_is_recomputed(cached, kind, capsys):
    """A rank renamed in index.json (1 → 7, or 0 → 7 on a one-rank run) without its digest: the
    cache is not served, the analysis is the fresh one, with one note."""
    path, index, want = cached[kind]
    last = json.loads(index)["ranks"][-1]["path"]
    _edit(path, index, lambda r: r.update(rank=7) if r["path"] == last else None, sign=False)
    got = _j(analyze_run(path, workers=1).to_json())
    same(want, got)
    assert 7 not in [r["rank"] for r in got["summary"]["per_rank"]]
    assert "does not match its digest" in capsys.readouterr().err


@pytest.mark.committed
@pytest.mark.parametrize("kind", sorted(RUNS))
def test_a_signed_index_whose_ranks_disagree_with_the_traces_is_recomputed(cached, kind, capsys):
    """Signed, but rank 7 where the trace's distributedInfo (or its world size) says otherwise."""
    path, index, want = cached[kind]
    last = json.loads(index)["ranks"][-1]["path"]
    _edit(path, index, lambda r: r.update(rank=7) if r["path"] == last else None)
    same(want, _j(analyze_run(path, workers=1).to_json()))
    assert "rank 7" in capsys.readouterr().err


@pytest.mark.committed
@pytest.mark.parametrize("body", [{}, "x", {"json_schema": "workbench.analyze/1", "run": {}, "diagnoses": []}],
                         ids=["empty", "text", "no_summary"])
def test_a_signed_result_that_is_no_analysis_is_not_served(cached, body, capsys):
    """The cached --json document under the right key and with its digest, but not an analysis:
    not served (a body of {} printed {} with exit 0), with one note."""
    from workbench.pipeline.cache import RESULT, cached_result

    path, _, want = cached["cpu"]
    analyze_run(path, workers=1)  # the summaries' cache, for write_result
    from workbench.pipeline import analyze

    analyze(path)  # writes analysis.json (a bad one is not served: analysed again)
    f = cache_dir(path) / RESULT
    doc = json.loads(f.read_text())
    assert cached_result(path) == doc["analysis"]
    f.write_text(json.dumps({"key": doc["key"], "digest": _digest(body), "analysis": body}))
    capsys.readouterr()
    assert cached_result(path) is None
    assert "not a workbench.analyze/1 document" in capsys.readouterr().err
