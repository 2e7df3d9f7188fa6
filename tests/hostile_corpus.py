"""A hostile corpus generated at test time from committed traces, and what the CLI does with each case.

Every case is built in a fresh directory from ``traces/engine_ddp`` (a 2-rank gloo run: 15.6 ms steps,
3 recorded per rank), the GPU runs under ``tests/analysis/data`` or bytes written here (the multi-GB
ones as gzip members compressed once and written many times: :mod:`tests.hostile_gen`), then run
through the CLI as a user would (``analyze --json``, ``analyze``, ``report``, ``plan --from-run``) in a
subprocess under a 3 GiB address-space limit and a time limit. :func:`observe` records the exit code,
the first stderr line, the peak RSS (``wait4``), the time, and classifies the outcome:

- **traceback**: exit other than 0 and 2, or ``Traceback`` on stderr;
- **hang**: still running at the case's time limit (killed);
- **silent nonsense**: exit 0 where the case expects an error, or a result that does not name what
  was implausible (``says`` missing from the warnings), or numbers that do not hold: a non-finite
  or non-positive step, shares that do not sum to 100, a numpy warning on stderr, or the case's own
  check (steps counted, the step against the unmodified trace's, the diagnoses).

``tests/load/test_hostile_corpus.py`` runs each case as a test; ``tests/load/test_reliability.py`` renders the
counts per class into RELIABILITY.md.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from tests.conftest import TRACES
from tests.hostile_gen import real_events, repeated, tiny_events, write_gzip

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "analysis" / "data"
RUN = "engine_ddp"
BASE_STEP_MS = 15.557  # engine_ddp rank 0 alone: its 3 recorded steps (ProfilerStep#3-5), mean
BASE_DIAGNOSES = ["exposed_communication"]
AS_LIMIT = 3 << 30  # address space of each CLI run: a runaway is stopped, not the machine
MAX_RSS_MB = 2048  # what any case may peak at


@dataclass(frozen=True)
class Case:
    name: str
    klass: str
    what: str
    build: Callable[[Path], Path]
    """Builds the input under the given empty directory; returns the path the command reads."""
    expect: str  # "error" (exit 2, one line), "result" (exit 0, with a warning that names the problem) or
    #              "capture" (`workbench profile` of a hostile script: the script's own exit code, checked in the manifest)
    says: str = ""
    """A substring of the error line, or of one of the run's warnings."""
    check: Callable[[dict], str | None] | None = None
    """For a result: what is wrong with its numbers (None: they hold)."""
    argv: tuple[str, ...] = ("analyze", "--json")
    env: dict = field(default_factory=dict)
    slow: bool = False
    timeout_s: float = 120
    args: tuple[str, ...] = ()
    """Arguments after the target (a profiled script's own)."""
    exit_code: int = 0
    """For "capture": the exit code the script itself ends with, which `workbench profile` must return."""
    text_check: Callable[[str], str | None] | None = None
    """For a text-mode result (no --json): what is wrong with its stdout (None: it holds)."""
    after: Callable[[Path], str | None] | None = None
    """What is wrong with what the command left in the case's directory (None: it holds)."""
    fsize: int | None = None
    """RLIMIT_FSIZE of the command in bytes: a write past it fails as on a full disk."""


@dataclass(frozen=True)
class Observed:
    exit_code: int | str
    message: str  # the first stderr line (a result: the matching warning), tmp path as DIR
    rss_mb: float
    seconds: float
    problem: str | None  # None, or "traceback", "hang", "nonsense: …"

    @property
    def kind(self) -> str:
        return (self.problem or "ok").split(":")[0]


# ---- builders ------------------------------------------------------------------------------------

def _text(rank: int = 0, run: str = RUN) -> bytes:
    return gzip.decompress((TRACES / run / f"rank{rank}.pt.trace.json.gz").read_bytes())


def _doc(rank: int = 0) -> dict:
    return json.loads(_text(rank))


def _bare(d: Path, doc: dict, name: str = "rank0.pt.trace.json") -> Path:
    run = d / "run"
    run.mkdir()
    (run / name).write_text(json.dumps(doc))
    return run


def _copy_run(d: Path, src: Path) -> Path:
    run = d / "run"
    shutil.copytree(src, run, ignore=shutil.ignore_patterns(".workbench-cache"))
    return run


def _steps(doc: dict) -> list[dict]:
    return sorted((e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")
                   and e.get("cat") == "user_annotation"), key=lambda e: e["ts"])


def _ops(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]


def _edit(fn, name: str = "rank0.pt.trace.json"):
    def build(d: Path) -> Path:
        doc = _doc()
        fn(doc)
        return _bare(d, doc, name)
    return build


DEEP = 5000


def _deep_header(name: str):
    def build(d: Path) -> Path:
        text = _text()
        deep = b"[" * DEEP + b"]" * DEEP
        run = d / "run"
        run.mkdir()
        (run / name).write_bytes(b'{"nested": ' + deep + b", " + text.lstrip()[1:])
        return run
    return build


def _deep_args(name: str, depth: int = DEEP):
    def build(d: Path) -> Path:
        doc = _doc()
        _ops(doc)[100]["args"] = {"deep": "@DEEP@"}
        run = d / "run"
        run.mkdir()
        (run / name).write_text(json.dumps(doc).replace('"@DEEP@"', "[" * depth + "]" * depth))
        return run
    return build


def _padded(name: str, gib: float):
    """One event, then ``gib`` GiB of whitespace, then the end of the array: no event separator."""
    def build(d: Path) -> Path:
        run = d / "run"
        run.mkdir()
        head = (b'{"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, '
                b'"ts": 0, "dur": 10}')
        write_gzip(run / name, [(head, 1), *repeated(b" " * 1024, int(gib * 2**30)), (b"]}", 1)])
        return run
    return build


def _tiny(n: int):
    def build(d: Path) -> Path:
        run = d / "run"
        run.mkdir()
        write_gzip(run / "rank0.pt.trace.json.gz", tiny_events(n))
        return run
    return build


def _real_events(gib: float):
    def build(d: Path) -> Path:
        run = d / "run"
        run.mkdir()
        write_gzip(run / "rank0.pt.trace.json.gz", real_events(_text(), int(gib * 2**30)))
        return run
    return build


def _many_steps(n: int):
    """``n`` steps of 100 µs, each holding one op."""
    def build(d: Path) -> Path:
        run = d / "run"
        run.mkdir()
        with (run / "rank0.pt.trace.json").open("w") as f:
            f.write('{"traceEvents": [')
            f.write(",".join(f'{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{i}","pid":1,"tid":1,"ts":{i * 100},'
                             f'"dur":100}},{{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":{i * 100 + 10},"dur":50}}'
                             for i in range(n)))
            f.write("]}")
        return run
    return build


def _unique_names(n: int):
    def build(d: Path) -> Path:
        run = d / "run"
        run.mkdir()
        with gzip.open(run / "rank0.pt.trace.json.gz", "wt", compresslevel=1) as f:
            f.write('{"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, '
                    '"ts": 0, "dur": 1000}')
            for i in range(n):
                f.write(f',{{"ph":"X","name":"op{i}","ts":1,"dur":1,"pid":1}}')
            f.write("]}")
        return run
    return build


def _manifest(edit: Callable[[dict], object] | None = None, raw: bytes | None = None, directory: bool = False):
    def build(d: Path) -> Path:
        run = _copy_run(d, TRACES / RUN)
        m = run / "manifest.json"
        if directory:
            m.unlink()
            m.mkdir()
        elif raw is not None:
            m.write_bytes(raw)
        else:
            doc = json.loads(m.read_text())
            edit(doc)
            m.write_text(json.dumps(doc))
        return run
    return build


def _deep_manifest(d: Path) -> Path:
    return _manifest(raw=b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")(d)


def _non_utf8_manifest(d: Path) -> Path:
    raw = (TRACES / RUN / "manifest.json").read_bytes().replace(b'"ok"', b'"o\xffk"', 1)
    return _manifest(raw=raw)(d)


def _odd_name(name: bytes):
    def build(d: Path) -> Path:
        run = d / "run"
        run.mkdir()
        shutil.copy(TRACES / RUN / "rank0.pt.trace.json.gz", os.fsencode(run) + b"/" + name)
        return run
    return build


def _cached(edit: Callable[[Path], None]):
    """The run analysed once (its cache written), then the cache edited."""
    def build(d: Path) -> Path:
        run = _copy_run(d, TRACES / RUN)
        subprocess.run([sys.executable, "-m", "workbench", "analyze", "--json", str(run)], capture_output=True,
                       cwd=ROOT, env=_env({}), timeout=120, check=True)
        edit(run / ".workbench-cache")
        return run
    return build


def _result_body(body):
    def edit(cache: Path) -> None:  # every cached document (analysis.json, analysis+alternatives.json)
        for f in cache.glob("analysis*.json"):
            doc = json.loads(f.read_text())
            doc["analysis"] = body(doc["analysis"])
            f.write_text(json.dumps(doc))
    return edit


def _rename_rank(cache: Path) -> None:
    doc = json.loads((cache / "index.json").read_text())
    for r in doc["ranks"]:
        if r["rank"] == 1:
            r["rank"] = 7
    (cache / "index.json").write_text(json.dumps(doc))
    for f in cache.glob("analysis*.json"):
        f.unlink()


def _without_gpu_clock(src: str, sync_every: int | None = None):
    """A committed host-ahead GPU run whose steps CSV lost ``gpu_step_ms``; ``sync_every``: the host
    also waits every N steps for the GPU (its step there holds what the N steps took on the GPU,
    their ``gpu_step_ms``, less its other host steps), the last period left open, as a run ended
    between two syncs is."""
    def build(d: Path) -> Path:
        import csv

        run = _copy_run(d, DATA / src)
        f = run / "steps_rank0.csv"
        rows = list(csv.DictReader(f.open()))
        cols = [c for c in rows[0] if c != "gpu_step_ms"]
        last = max(int(r["step"]) for r in rows)
        by_step = {int(r["step"]): r for r in rows}
        for s, r in by_step.items():
            # periods from step 10: clear of the profiled steps and of the export's pause (step 5)
            if sync_every and s >= 10 and (s - 10) % sync_every == sync_every - 1 and s + sync_every <= last:
                period = [by_step[k] for k in range(s - sync_every + 1, s + 1)]
                gpu = sum(float(x["gpu_step_ms"]) for x in period)
                host = sum(float(x["step_ms"]) for x in period if x is not r)
                r["step_ms"] = f"{gpu - host:.3f}"  # the host waits here for what the period queued
        with f.open("w", newline="") as out:
            w = csv.DictWriter(out, cols, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
        return run
    return build


def _gpu_truth(src: str) -> float:
    """The mean GPU-clock step of the run's steady unprofiled steps, as its CSV recorded it."""
    import csv

    rows = [r for r in csv.DictReader((DATA / src / "steps_rank0.csv").open()) if int(r["step"]) >= 6 and r["profiled"] == "0"]
    return sum(float(r["gpu_step_ms"]) for r in rows) / len(rows)


# ---- checks --------------------------------------------------------------------------------------

def _near(key: str, want: float, rel: float):
    def check(j: dict) -> str | None:
        got = j["summary"][key]
        return None if got is not None and abs(got / want - 1) <= rel else f"{key} {got} where {want:.3f} ± {rel:.0%}"
    return check


def _all(*checks):
    def check(j: dict) -> str | None:
        return next((p for c in checks if (p := c(j))), None)
    return check


def _steps_n(n: int):
    return lambda j: None if j["summary"]["steps"] == n else f"{j['summary']['steps']} steps where {n}"


def _diagnoses(ids: list[str]):
    def check(j: dict) -> str | None:
        got = sorted(x["id"] for x in j["diagnoses"])
        return None if got == sorted(ids) else f"diagnoses {got} where {sorted(ids)}"
    return check


def _ranks(ranks: list[int]):
    def check(j: dict) -> str | None:
        got = [r["rank"] for r in j["summary"]["per_rank"]]
        return None if got == ranks else f"ranks {got} where {ranks}"
    return check


_BASE = _all(_steps_n(3), _near("step_ms", BASE_STEP_MS, 0.01), _diagnoses(BASE_DIAGNOSES))


def _set_dur(pick, value):
    def fn(doc):
        for e in pick(doc):
            e["dur"] = value
    return fn


def _dup_markers(doc):
    doc["traceEvents"] += [dict(e) for e in _steps(doc)]


def _overlapping_markers(doc):
    for e in _steps(doc)[:-1]:
        e["dur"] += 5000  # each runs 5 ms into the next
    

def _nested_markers(doc):
    # each marker wrapped by a range of its own name 1 ms larger on both sides
    doc["traceEvents"] += [dict(e, ts=e["ts"] - 1000, dur=e["dur"] + 2000) for e in _steps(doc)]


def _bad_host_name(d: Path) -> Path:
    run = d / "run"
    run.mkdir()
    (run / "trace.json").write_bytes(_text().replace(b'"host_name": "', b'"host_name": "\xff', 1))
    return run


def _huge_rank(doc):
    doc["distributedInfo"]["rank"] = 10**9


def _step_zero(doc):
    _steps(doc)[1]["dur"] = 0


def _file(build, name: str):
    """The one file ``build`` made, for the upload."""
    return lambda d: build(d) / name


def _zip_run(manifest: bytes):
    def build(d: Path) -> Path:
        import zipfile

        z = d / "run.zip"
        with zipfile.ZipFile(z, "w") as zf:
            zf.writestr("manifest.json", manifest)
            zf.write(TRACES / RUN / "rank0.pt.trace.json.gz", "rank0.pt.trace.json.gz")
        return z
    return build


# ---- markup, JSON numbers, impossible figures, partial runs, plans, bounded work, writes -------------

GPU_RUN = DATA / "gpu_tiny"  # one H200 rank: kernels, a manifest, steps CSV
SHAPES_RUN = DATA / "eff_gpt_bf16"  # a GPT on an H200 with its shapes: the model, MFU, kernel classes
MARKUP = "[bold]x[/bold] [/] [link=http://e.x]y[red \\[z :smile:"
"""Text rich would read as markup: lost (``[bold]``), a MarkupError (``[/]``), an escape (``\\[``), an emoji code."""


def _gpu_doc(src: Path = GPU_RUN) -> dict:
    return json.loads(gzip.decompress((src / "rank0.pt.trace.json.gz").read_bytes()))


def _gpu_run(edit_doc=None, edit_manifest=None, src: Path = GPU_RUN, name: str = "run"):
    """``src`` copied, its rank-0 trace (written plain) and manifest edited."""
    def build(d: Path) -> Path:
        run = d / name
        shutil.copytree(src, run, ignore=shutil.ignore_patterns(".workbench-cache", "rank0.pt.trace.json.gz"))
        doc = _gpu_doc(src)
        if edit_doc:
            edit_doc(doc)
        (run / "rank0.pt.trace.json").write_text(json.dumps(doc))
        if edit_manifest:
            m = json.loads((run / "manifest.json").read_text())
            edit_manifest(m)
            (run / "manifest.json").write_text(json.dumps(m))
        return run
    return build


def _named_run(name: str):
    def build(d: Path) -> Path:
        run = d / name
        shutil.copytree(TRACES / RUN, run, ignore=shutil.ignore_patterns(".workbench-cache"))
        return run
    return build


def _device_named(doc):
    doc["deviceProperties"][0]["name"] = "NVIDIA H200 " + MARKUP


def _failed_with(m):
    m.update(status="failed", exit_code=1, error="RuntimeError: " + MARKUP)


def _kernel_named(doc):
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["name"] = "my_kernel" + MARKUP  # no class matches: listed among the unclassified kernels


def _shows(*texts: str):
    def check(out: str) -> str | None:
        flat = " ".join(out.split())
        return next((f"stdout lacks {t!r}" for t in texts if " ".join(t.split()) not in flat), None)
    return check


def _kernels_dropped(doc):
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "kernel"]


GEMMS = ("aten::mm", "aten::addmm", "aten::linear", "aten::matmul", "aten::bmm")


def _dims(scale: int | None = None, names=GEMMS, zero: bool = False):
    def edit(doc):
        for e in doc["traceEvents"]:
            dims = (e.get("args") or {}).get("Input Dims")
            if e.get("name") in names and dims:
                e["args"]["Input Dims"] = [[0 if zero else x * scale for x in dim] if isinstance(dim, list) else dim
                                           for dim in dims]
    return edit


def _no_model_shapes(doc):
    """The GEMMs scaled 100× and the embedding gone: no model, so MFU is the trace's FLOPs."""
    _dims(100)(doc)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != "aten::embedding"]


def _copies_scaled(doc):
    for e in doc["traceEvents"]:
        if e.get("cat") == "gpu_memcpy" and "DtoD" in str(e.get("name")) and isinstance((e.get("args") or {}).get("bytes"), int):
            e["args"]["bytes"] *= 4


def _one_of_eight(d: Path) -> Path:
    """engine_ddp's manifest and rank 0 as a job of 8 ranks whose other 7 traces never arrived."""
    run = _copy_run(d, TRACES / RUN)
    for f in run.glob("*rank[1-9]*"):
        f.unlink()
    m = json.loads((run / "manifest.json").read_text())
    m["world_size"] = 8
    (run / "manifest.json").write_text(json.dumps(m))
    doc = _doc()
    doc["distributedInfo"]["world_size"] = 8
    (run / "rank0.pt.trace.json.gz").unlink()
    (run / "rank0.pt.trace.json").write_text(json.dumps(doc))
    return run


def _mixed_gpus(d: Path) -> Path:
    """Two NCCL ranks of one job, rank 1 on an A100 beside rank 0's H200."""
    run = d / "run"
    run.mkdir()
    doc = _gpu_doc()
    for r, name in ((0, "NVIDIA H200"), (1, "NVIDIA A100-SXM4-80GB")):
        x = json.loads(json.dumps(doc))
        x["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": 2}
        x["deviceProperties"][0]["name"] = name
        for e in x["traceEvents"]:
            if isinstance(e.get("pid"), int) and e["pid"] > 100:
                e["pid"] += r  # a process of its own
        (run / f"rank{r}.pt.trace.json").write_text(json.dumps(x))
    return run


def _relabelled_gpu(d: Path) -> Path:
    """gpu_tiny as if it ran on an A100 (B of a compare against the H200 original)."""
    def a100(doc):
        doc["deviceProperties"][0]["name"] = "NVIDIA A100-SXM4-80GB"
    return _gpu_run(a100, lambda m: m.update(device_name="NVIDIA A100-SXM4-80GB"))(d)


OWN_CACHE = {"WORKBENCH_CACHE_DIR": "{tmp}/cache"}
"""For a command that analyses a committed run: its cache under the case's directory, not beside the run."""


def _mismatch(word: str):
    def check(j: dict) -> str | None:
        said = j.get("mismatches")
        return None if said and any(word in m for m in said) else f"mismatches {said} do not name {word!r}"
    return check


def _partial(n: int, world: int):
    def check(j: dict) -> str | None:
        p = j["run"].get("partial")
        if not p or len(p["ranks_analysed"]) != n or p["world_size"] != world:
            return f"run.partial {p} where {n} of {world}"
        return None if f"from {n} of {world} ranks" in j["verdict"] else f"the verdict does not say so: {j['verdict'][-80:]}"
    return check


def _devices(n: int):
    def check(j: dict) -> str | None:
        dv = j["run"].get("devices")
        return None if dv and len(dv) == n and f"ranks on {n} GPU models" in j["verdict"] else f"run.devices {dv}"
    return check


PLAN_RUN = TRACES / "case_gpu_3_batch32"


def _plan_file(edit):
    """A plan of the committed run (workbench plan --from-run, made in this process), edited."""
    def build(d: Path) -> Path:
        from workbench.calibration.request import build_request
        from workbench.plan.report import to_json
        from workbench.plan.search import plan

        doc = to_json(plan(build_request(model="engine-370m", gpus="1", gpu="H200", top="1")))
        text = edit(doc)
        p = d / "plan.json"
        p.write_text(text if isinstance(text, str) else json.dumps(doc))
        return p
    return build


def _set(path: str, value):
    def edit(doc):
        *head, last = path.split(".")
        x = doc
        for k in head:
            x = x[int(k)] if k.isdigit() else x[k]
        x[last] = value
    return edit


def _many_ranks(n: int):
    def build(d: Path) -> Path:
        run = d / "run"
        run.mkdir()
        for r in range(n):
            (run / f"rank{r}.pt.trace.json").write_text(
                '{"distributedInfo": {"rank": %d, "world_size": %d}, "traceEvents": [{"ph": "X", "cat": "user_annotation", '
                '"name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000}]}' % (r, n))
        return run
    return build


def _zip_members(n: int):
    def build(d: Path) -> Path:
        import zipfile

        z = d / "run.zip"
        with zipfile.ZipFile(z, "w") as zf:
            zf.write(TRACES / RUN / "rank0.pt.trace.json.gz", "rank0.pt.trace.json.gz")
            for i in range(n - 1):
                zf.writestr(f"steps_rank{i + 1}.csv", "step,step_ms\n0,1.0\n")
        return z
    return build


def _nothing_left(name: str):
    def after(d: Path) -> str | None:
        left = sorted(p.name for p in d.iterdir() if p.name.startswith((name, f".{name}")))
        return f"left behind: {left}" if left else None
    return after


CASES: list[Case] = [
    Case("baseline", "baseline", "rank 0 of the committed run alone, unmodified", _edit(lambda doc: None), "result", check=_BASE),
    # deep JSON
    Case("deep_header", "deep JSON", f"a trace whose header holds arrays nested {DEEP} deep", _deep_header("rank0.pt.trace.json"),
         "error", "nested about 1000 levels deep"),
    Case("deep_header_foreign", "deep JSON", "the same under a foreign name (`a.json`)", _deep_header("a.json"), "error",
         "nested about 1000 levels deep"),
    Case("deep_args", "deep JSON", f"one op's `args` nested {DEEP} deep", _deep_args("rank0.pt.trace.json"), "error",
         "nested about 1000 levels deep"),
    Case("deep_args_foreign", "deep JSON", "the same under a foreign name (`b.json`)", _deep_args("b.json"), "error",
         "nested about 1000 levels deep"),
    Case("deep_args_500", "deep JSON", "one op's `args` nested 500 deep (within the bound)", _deep_args("rank0.pt.trace.json", 500),
         "result", check=_BASE),
    Case("deep_report", "deep JSON", "`workbench report` on the deep header", _deep_header("rank0.pt.trace.json"), "error",
         "nested about 1000 levels deep", argv=("report", "--html", "{tmp}/r.html")),
    # unbounded text
    Case("padding_60mib", "unbounded text", "one event, then 60 MiB of whitespace (gzip)", _padded("rank0.pt.trace.json.gz", 60 / 1024),
         "result", check=_steps_n(1)),
    Case("padding_4gib", "unbounded text", "one event, then 4 GiB of whitespace (4 MB of gzip)", _padded("rank0.pt.trace.json.gz", 4),
         "error", "cannot be read in bounded memory"),
    Case("padding_4gib_foreign", "unbounded text", "the same under a foreign name", _padded("padded.json.gz", 4), "error",
         "cannot be read in bounded memory"),
    # many events
    Case("tiny_events_2gib", "many tiny events", "2 GiB of 48.8M tiny events (7 MB of gzip)", _tiny(48_800_000), "error",
         "more than the 20,000,000"),
    Case("tiny_events_9gib", "many tiny events", "9 GiB of 220M tiny events", _tiny(220_000_000), "error",
         "more than 8 GiB"),
    Case("real_events_9gib", "many tiny events", "9 GiB of the committed trace's events, repeated (gzip)", _real_events(9),
         "error", "more than 8 GiB"),
    Case("tiny_events_over_limit", "many tiny events", "300k tiny events with `WORKBENCH_MAX_EVENTS=100000`", _tiny(300_000),
         "error", "more than 100,000 events", env={"WORKBENCH_MAX_EVENTS": "100000"}),
    Case("tiny_events_under_limit", "many tiny events", "300k tiny events (one step of 1 ms)", _tiny(300_000), "result",
         check=_steps_n(1)),
    Case("step_markers_300k", "many tiny events", "300k steps of 100 µs (a ProfilerStep marker each)", _many_steps(300_000),
         "result", "the first 10,000 are analysed", check=_steps_n(10_000), timeout_s=300),  # ~9 s of CPU, 14 s wall on a loaded 2-core box
    Case("unique_names", "many tiny events", "1.1M events, each of its own name", _unique_names(1_100_000), "error",
         "distinct event names"),
    # manifest
    Case("manifest_directory", "manifest", "`manifest.json` is a directory", _manifest(directory=True), "error", "not a regular file"),
    Case("manifest_schema_text", "manifest", '`schema_version: "x"`', _manifest(lambda m: m.update(schema_version="x")), "error",
         "is not a version number"),
    Case("manifest_world_size_text", "manifest", '`world_size: "two"`', _manifest(lambda m: m.update(world_size="two")), "result",
         "world_size is \"two\"", check=_ranks([0, 1])),
    Case("manifest_deep", "manifest", "`manifest.json` nested 100k deep", _deep_manifest, "error", "nested more than 64 levels"),
    Case("manifest_non_utf8", "manifest", "a non-UTF-8 byte in `manifest.json`", _non_utf8_manifest, "error", "not UTF-8"),
    Case("manifest_deep_cached", "manifest", "the deep manifest, analysed with the cache (text mode)", _deep_manifest, "error",
         "nested more than 64 levels", argv=("analyze",)),
    Case("manifest_directory_report", "manifest", "`report` on the manifest directory", _manifest(directory=True), "error",
         "not a regular file", argv=("report", "--html", "{tmp}/r.html")),
    Case("manifest_deep_report", "manifest", "`report` on the deep manifest", _deep_manifest, "error", "nested more than 64",
         argv=("report", "--html", "{tmp}/r.html")),
    Case("manifest_non_utf8_from_run", "manifest", "`plan --from-run` on the non-UTF-8 manifest", _non_utf8_manifest, "error",
         "not UTF-8", argv=("plan", "--from-run")),
    Case("manifest_deep_calibrate", "manifest", "`plan --calibrate` on the deep manifest", _deep_manifest, "error",
         "nested more than 64", argv=("plan", "engine-370m", "--gpus", "8", "--gpu", "H200", "--calibrate")),
    # file names
    Case("name_not_utf8", "file names", "a trace named `r\\xffank0.json.gz` (text mode, `PYTHONIOENCODING=utf-8`)",
         _odd_name(b"r\xffank0.json.gz"), "result", argv=("analyze",), env={"PYTHONIOENCODING": "utf-8"}),
    Case("name_not_utf8_json", "file names", "the same, `--json`", _odd_name(b"r\xffank0.json.gz"), "result", "took 1 trace file",
         check=_BASE, env={"PYTHONIOENCODING": "utf-8"}),
    # the cache
    Case("cache_result_empty", "cache", "cached `analysis.json` body `{}` under the right key", _cached(_result_body(lambda a: {})),
         "result", "ignoring an unreadable analysis cache", check=_ranks([0, 1])),
    Case("cache_result_text", "cache", 'cached body `"x"`', _cached(_result_body(lambda a: "x")), "result",
         "ignoring an unreadable analysis cache", check=_ranks([0, 1])),
    Case("cache_result_no_summary", "cache", "cached body without `summary` (text mode)",
         _cached(_result_body(lambda a: {k: v for k, v in a.items() if k != "summary"})), "result",
         "ignoring an unreadable analysis cache", argv=("analyze",)),
    Case("cache_index_rank_renamed", "cache", "`index.json` with rank 1 renamed 7", _cached(_rename_rank), "result",
         "ignoring an unreadable analysis cache", check=_ranks([0, 1])),
    # the app's upload (workbench.ui.uploads.store_upload, through tests/scripts/upload_one.py)
    Case("upload_ok", "app upload", "the committed rank-0 trace", _file(_edit(lambda doc: None), "rank0.pt.trace.json"),
         "result", argv=("upload",)),
    Case("upload_deep_header", "app upload", "the deep-header trace", _file(_deep_header("rank0.pt.trace.json"), "rank0.pt.trace.json"),
         "error", "nested about 1000 levels deep", argv=("upload",)),
    Case("upload_padding_4gib", "app upload", "the 4 GiB padded gzip", _file(_padded("rank0.pt.trace.json.gz", 4), "rank0.pt.trace.json.gz"),
         "error", "cannot be read in bounded memory", argv=("upload",)),
    Case("upload_tiny_events_2gib", "app upload", "the 48.8M tiny events", _file(_tiny(48_800_000), "rank0.pt.trace.json.gz"),
         "error", "more than the 20,000,000", argv=("upload",)),
    Case("upload_zip_deep_manifest", "app upload", "a zipped run whose manifest is nested 100k deep",
         _zip_run(b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"), "error", "nested more than 64", argv=("upload",)),
    # implausible timings
    Case("step_zero", "implausible timings", "ProfilerStep#4 of duration 0", _edit(_step_zero), "result", "of no duration",
         check=_steps_n(2)),
    Case("step_negative", "implausible timings", "ProfilerStep#4 of duration −15.9 ms",
         _edit(lambda doc: _steps(doc)[1].update(dur=-15927.3)), "result", "negative duration", check=_steps_n(2)),
    Case("step_1e18", "implausible timings", "ProfilerStep#5 of 1e18 µs", _edit(lambda doc: _steps(doc)[2].update(dur=1e18)),
         "result", "past the trace's end", check=_all(_steps_n(2), lambda j: None if j["summary"]["breakdown_pct"]["idle"] < 50
                                                       else f"idle {j['summary']['breakdown_pct']['idle']}%")),
    Case("ops_1e15", "implausible timings", "every 1500th op (6) of 1e15 µs", _edit(_set_dur(lambda doc: _ops(doc)[::1500], 1e15)), "result",
         "past the trace's end", check=_all(_steps_n(3), _diagnoses(BASE_DIAGNOSES))),
    Case("ops_1e300", "implausible timings", "every 10th op of 1e300 µs", _edit(_set_dur(lambda doc: _ops(doc)[::10], 1e300)),
         "result", "past the trace's end", check=_all(_steps_n(3), lambda j: None if j["summary"]["breakdown_pct"]["communication"] < 50
                                                      else f"communication {j['summary']['breakdown_pct']['communication']}%")),
    Case("markers_duplicated", "implausible timings", "every ProfilerStep marker written twice", _edit(_dup_markers), "result",
         "marked more than once", check=_BASE),
    Case("markers_overlapping", "implausible timings", "markers running 5 ms into the next", _edit(_overlapping_markers), "result",
         "run past the start of the next", check=_BASE),
    Case("markers_nested", "implausible timings", "each marker wrapped by one of its name 1 ms larger each side",
         _edit(_nested_markers), "result", "marked more than once", check=_BASE),
    Case("host_name_not_utf8", "implausible timings", "a foreign-named trace with a non-UTF-8 byte in `host_name`", _bad_host_name,
         "result", "took 1 trace file", check=_BASE),
    Case("rank_beyond_world", "implausible timings", "`distributedInfo.rank` 10⁹ with world size 2", _edit(_huge_rank), "result",
         "rank 1000000000 of world size 2", check=_ranks([0])),
    Case("host_ahead_eager", "implausible timings", "`gpu_host_ahead_eager` without `gpu_step_ms` (host 1.5 ms, GPU 4.6 ms)",
         _without_gpu_clock("gpu_host_ahead_eager"), "result", "host ran ahead",
         check=_near("step_ms", _gpu_truth("gpu_host_ahead_eager"), 0.10)),
    Case("host_ahead_graphs", "implausible timings", "`gpu_host_ahead_graphs` without `gpu_step_ms`",
         _without_gpu_clock("gpu_host_ahead_graphs"), "result", "host ran ahead",
         check=_near("step_ms", _gpu_truth("gpu_host_ahead_graphs"), 0.10)),
    Case("host_ahead_sync", "implausible timings", "the same with a sync every 5 steps from step 10, the last period open",
         _without_gpu_clock("gpu_host_ahead_graphs", 5), "result", "sync to sync",
         check=_near("step_ms", _gpu_truth("gpu_host_ahead_graphs"), 0.10)),
    # text from a run read as markup (text mode: what a person sees)
    Case("markup_run_name", "markup", "a run directory named `run[bold]x[red`", _named_run("run[bold]x[red"), "result",
         argv=("analyze",), text_check=_shows("run[bold]x[red: 2 rank(s)")),
    Case("markup_device_name", "markup", "a GPU whose name holds `[bold]`, `[/]`, `[link=…]`, `\\[`, `:smile:`",
         _gpu_run(_device_named, lambda m: m.pop("device_name")), "result", argv=("analyze",), text_check=_shows(MARKUP)),
    Case("markup_error", "markup", "a failed run whose error message holds the same", _gpu_run(None, _failed_with), "result",
         argv=("analyze",), text_check=_shows("the run failed: RuntimeError: " + MARKUP)),
    Case("markup_kernel_name", "markup", "a kernel whose name holds the same (unclassified)", _gpu_run(_kernel_named), "result",
         argv=("analyze",), text_check=_shows("my_kernel[bold]x[/bold] [/] [link=http://e.x]y[red")),
    Case("markup_compare", "markup", "`compare` of the bracketed run with itself", _named_run("run[bold]x[red"), "result",
         argv=("compare", str(TRACES / RUN)), text_check=_shows("B = run[bold]x[red"), env=OWN_CACHE),
    # numbers JSON cannot hold
    Case("json_gpu_copies_only", "JSON numbers", "a GPU trace with its kernels dropped (copies only): a NaN median",
         _gpu_run(_kernels_dropped), "result"),
    Case("plan_int_400_digits", "JSON numbers", "a plan whose `model.params` has 400 digits", _plan_file(_set("model.params", 10 ** 400)),
         "error", "model.params must be a number", argv=("compare", str(PLAN_RUN))),
    # impossible figures
    Case("shapes_gemms_x1000", "impossible figures", "every GEMM's `Input Dims` ×1000 (HFU 2e10 %, 7.6e10 % of peak)",
         _gpu_run(_dims(1000), src=SHAPES_RUN), "result", "the ops' shapes give"),
    Case("shapes_no_model_x100", "impossible figures", "GEMMs ×100 and no embedding: no model, MFU = the trace's FLOPs",
         _gpu_run(_no_model_shapes, src=SHAPES_RUN), "result", "implausible:"),
    Case("shapes_zero_embedding", "impossible figures", "the embedding's `Input Dims` all 0 (hidden, vocab, seq 0 at \"high\")",
         _gpu_run(_dims(names=("aten::embedding",), zero=True), src=SHAPES_RUN), "result", "zero-size tensors"),
    Case("copies_past_hbm", "impossible figures", "`gpu_fsdp2_370m`'s device-to-device copies of 4× their bytes (252 % of HBM)",
         _gpu_run(_copies_scaled, src=TRACES / "gpu_fsdp2_370m"), "result", "of the device's HBM bandwidth"),
    # partial and mixed runs
    Case("partial_one_of_eight", "partial and mixed runs", "a manifest and `distributedInfo` for 8 ranks, one rank's trace",
         _one_of_eight, "result", "partial run: traces of 1 of the job's 8 ranks", check=_partial(1, 8)),
    Case("mixed_gpus", "partial and mixed runs", "rank 0 on an H200, rank 1 on an A100 (one NCCL job)", _mixed_gpus, "result",
         "mixed devices", check=_devices(2)),
    Case("compare_other_gpu", "partial and mixed runs", "`compare --json` of an H200 run and its A100 twin", _relabelled_gpu,
         "result", argv=("compare", "--json", str(GPU_RUN)), check=_mismatch("the GPU"), env=OWN_CACHE),
    Case("compare_other_model", "partial and mixed runs", "`compare --json` of a 2-layer CPU GPT and an 8-layer H200 one",
         lambda d: SHAPES_RUN, "result", argv=("compare", "--json", str(TRACES / RUN)), check=_mismatch("the model"), env=OWN_CACHE),
    # plan files
    Case("plan_schema_2", "plan files", "a plan of schema `workbench.plan/2`", _plan_file(_set("json_schema", "workbench.plan/2")),
         "error", "reads 'workbench.plan/1'", argv=("compare", str(PLAN_RUN))),
    Case("plan_schema_999", "plan files", "a plan of schema `workbench.plan/999`", _plan_file(_set("json_schema", "workbench.plan/999")),
         "error", "reads 'workbench.plan/1'", argv=("compare", str(PLAN_RUN))),
    Case("plan_unknown_gpu", "plan files", "a plan for a GPU the device table lacks", _plan_file(_set("cluster.gpu", "Voodoo5 6000")),
         "error", "unknown GPU 'Voodoo5 6000': known ones are", argv=("compare", str(PLAN_RUN))),
    Case("plan_mfu_5", "plan files", "a plan predicting MFU 5.0 (500 %)", _plan_file(_set("plans.0.time.mfu", 5.0)), "error",
         "a fraction of the GPU's peak above 1", argv=("compare", str(PLAN_RUN))),
    Case("plan_mfu_1e300", "plan files", "a plan predicting MFU 1e300", _plan_file(_set("plans.0.time.mfu", 1e300)), "error",
         "plans[0].time.mfu must be a number", argv=("compare", str(PLAN_RUN))),
    Case("plan_flops_per_token_1e30", "plan files", "a plan whose `model_flops_per_token` is 1e30 (measured MFU 7.5e20 %)",
         _plan_file(_set("model.model_flops_per_token", 1e30)), "error", "model.model_flops_per_token must be a number ≤",
         argv=("compare", str(PLAN_RUN))),
    Case("plan_flops_per_token_1e15", "plan files", "a plan whose `model_flops_per_token` is 1e15 (400,000× its shape's)",
         _plan_file(_set("model.model_flops_per_token", 1e15)), "error", "not this model's FLOPs", argv=("compare", str(PLAN_RUN))),
    # bounded work
    Case("ranks_10000", "bounded work", "10,000 one-step rank traces (past 300 s before)", _many_ranks(10_000), "error",
         "more than the 1,024 ranks analysed at once"),
    Case("upload_zip_25000_members", "bounded work", "a zipped run of 25,000 members (162 s before)", _zip_members(25_000),
         "error", "more than the 4,097", argv=("upload",)),
    # writes that can be half done
    Case("report_disk_full", "half-done writes", "`report` where a file may not pass 256 KiB (RLIMIT_FSIZE: as a full disk)",
         _named_run("run"), "error", "cannot write", argv=("report", "--html", "{tmp}/r.html"), fsize=256 << 10,
         after=_nothing_left("r.html")),
]
def _steps_once(n: int):
    """Rank 0's steps CSV holds steps 0 … n−1, each once (a forked child wrote none of its own)."""
    def check(m: dict) -> str | None:
        import csv

        with open(Path(m["_dir"]) / "steps_rank0.csv", newline="") as f:
            steps = [int(r["step"]) for r in csv.DictReader(f)]
        return None if steps == list(range(n)) else f"steps {steps} where 0…{n - 1} once each"
    return check


def _hostile_script(d: Path) -> Path:
    """tests/scripts/hostile_train.py, copied under the case's directory (its processes are then
    known by their command line)."""
    target = d / "hostile_train.py"
    shutil.copy(ROOT / "tests" / "scripts" / "hostile_train.py", target)
    return target


# hostile scripts under `workbench profile`
PROFILE = ("profile", "--no-analyze", "--out", "{tmp}/run")
CASES += [
    Case("script_forks", "hostile scripts", "a script that `os.fork()`s at step 3: the child trains two steps, then "
         "blocks forever on a lock it inherited held", _hostile_script, "capture", "leftovers_ended", argv=PROFILE,
         args=("--fork",), check=_steps_once(8), slow=True),
    Case("script_trace_ready_exits", "hostile scripts", "a script whose own torch.profiler's `on_trace_ready` calls "
         "`sys.exit(9)`", _hostile_script, "capture", "sys.exit(9) at hostile_train.py", argv=PROFILE,
         args=("--trace-exit", "9"), exit_code=9, slow=True),
    Case("script_closes_stdio", "hostile scripts", "a script that closes stdout and stderr (the objects and the "
         "descriptors) at step 2 and trains on", _hostile_script, "capture", "status ok", argv=PROFILE,
         args=("--close-std",), check=_steps_once(8), slow=True),
]

# Over ~4 s each on an idle 2-core machine (gigabytes inflated, a million names): `pytest -m slow`;
# RELIABILITY.md's check runs every case.
SLOW = {"step_markers_300k", "padding_4gib", "padding_4gib_foreign", "tiny_events_2gib", "tiny_events_9gib", "real_events_9gib", "unique_names",
        "upload_padding_4gib", "upload_tiny_events_2gib"}
CASES = [replace(c, slow=True) if c.name in SLOW else c for c in CASES]
BY_NAME = {c.name: c for c in CASES}
assert SLOW <= set(BY_NAME)
assert len(BY_NAME) == len(CASES)


# ---- running a case ------------------------------------------------------------------------------

def _env(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKBENCH_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return {**env, **extra}


def _limit(fsize: int | None = None):
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
        if fsize is not None:
            import signal

            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) as on a full disk
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    return limit


_OBSERVED: dict[str, Observed] = {}


def observed(case: Case, d: Path) -> Observed:
    """:func:`observe` once per test session: each case's own test and RELIABILITY.md's check (which
    renders every case) share the observation instead of running the case twice. Under pytest-xdist
    the two may run in different worker processes: the observation is kept in a file of the test run
    (``PYTEST_XDIST_TESTRUNUID``), the first worker to reach a case observes it under a lock."""
    if case.name not in _OBSERVED:
        uid = os.environ.get("PYTEST_XDIST_TESTRUNUID")
        if not uid:
            _OBSERVED[case.name] = observe(case, d)
        else:
            import dataclasses
            import fcntl
            import tempfile

            shared = Path(tempfile.gettempdir()) / f"workbench-hostile-{uid}"
            shared.mkdir(exist_ok=True)
            with open(shared / f"{case.name}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                kept = shared / f"{case.name}.json"
                if kept.exists():
                    _OBSERVED[case.name] = Observed(**json.loads(kept.read_text()))
                else:
                    _OBSERVED[case.name] = observe(case, d)
                    kept.write_text(json.dumps(dataclasses.asdict(_OBSERVED[case.name])))
    return _OBSERVED[case.name]


def observe(case: Case, d: Path) -> Observed:
    """Build ``case`` under the empty directory ``d``, run its command, classify what happened."""
    target = case.build(d)
    argv = [a.replace("{tmp}", str(d)) for a in case.argv]
    if argv == ["upload"]:
        cmd = [sys.executable, str(ROOT / "tests" / "scripts" / "upload_one.py"), str(d / "uploads"), "up", str(target)]
    else:
        cmd = [sys.executable, "-m", "workbench", *argv, str(target), *case.args]
    out, err = d / "stdout.txt", d / "stderr.txt"
    start = time.monotonic()
    with out.open("wb") as o, err.open("wb") as e:
        env = _env({k: v.replace("{tmp}", str(d)) for k, v in case.env.items()})
        p = subprocess.Popen(cmd, stdout=o, stderr=e, cwd=ROOT, env=env, preexec_fn=_limit(case.fsize))
        hung = False
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > case.timeout_s:
                p.kill()
                _, status, usage = os.wait4(p.pid, 0)
                hung = True
                break
            time.sleep(0.05)
    p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: keep Popen from waiting again
    seconds = time.monotonic() - start
    rss = usage.ru_maxrss / 1024
    stderr = err.read_text(errors="backslashreplace")
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    code = p.returncode
    problem = None
    message = first
    if hung:
        problem = "hang"
    elif rss > MAX_RSS_MB:
        problem = f"nonsense: peak RSS {rss:.0f} MB over {MAX_RSS_MB} MB"
    elif case.expect == "capture":
        problem, message = _judge_capture(case, code, d, stderr)
    elif "Traceback" in stderr or code not in (0, 2):
        problem = "traceback"
    elif case.expect == "error":
        if code != 2:
            problem = "nonsense: exit 0 where an error was due"
        elif case.says not in first or not first.startswith("workbench: error:"):
            problem = f"nonsense: the error does not say {case.says!r}"
    else:
        problem, message = _judge_result(case, code, out.read_text(errors="backslashreplace"), stderr)
    if problem is None and case.after and (why := case.after(d)):
        problem = f"nonsense: {why}"
    message = message.replace(str(d), "DIR").encode("utf-8", "backslashreplace").decode()  # a name's lone surrogates
    return Observed(code, message, round(rss), round(seconds, 1), problem)


def _judge_capture(case: Case, code: int, d: Path, stderr: str) -> tuple[str | None, str]:
    """`workbench profile` of a hostile script: the script's exit code returned and recorded, no
    traceback of the workbench's, the status and error true to how it ended (``says``), one row per
    iteration of rank 0 (no rows of a forked child), nothing of the job left running."""
    import psutil

    if "Traceback" in stderr:
        return "traceback", next((ln for ln in stderr.splitlines() if "Error" in ln), "")
    if code != case.exit_code:
        return f"nonsense: exit {code} where the script's {case.exit_code} was due", ""
    try:
        m = json.loads((d / "run" / "manifest.json").read_text())
    except (OSError, ValueError):
        return "nonsense: no manifest", ""
    said = f"status {m.get('status')}, exit {m.get('exit_code')}" + (f", error: {m['error']}" if m.get("error") else "")
    if m.get("exit_code") != case.exit_code or m.get("status") != ("ok" if case.exit_code == 0 else "failed"):
        return f"nonsense: manifest says {said}", said
    if case.says and case.says not in said + json.dumps(m):
        return f"nonsense: the manifest does not say {case.says!r}", said
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if str(d) in " ".join(p.info["cmdline"] or [])]
    if left:
        return f"nonsense: {len(left)} process(es) of the job left running", said
    if case.check and (why := case.check({**m, "_dir": str(d / "run")})):
        return f"nonsense: {why}", said
    return None, said
def _strict(token: str):
    raise ValueError(f"{token}: not strict JSON")


def _impossible(j: dict) -> str | None:
    """A figure past its physical bound stated as fact (workbench.pipeline.bounds): MFU/HFU or a
    class's % of roofline above 100, a model size of 0 or less."""
    e = j.get("efficiency") or {}
    for k in ("mfu_pct", "mfu_bf16_pct", "hfu_pct", "hfu_bf16_pct"):
        if isinstance(e.get(k), (int, float)) and e[k] > 100:
            return f"efficiency.{k} {e[k]:.3g} % stated"
    for c in e.get("classes") or []:
        if isinstance(c.get("pct_of_peak"), (int, float)) and c["pct_of_peak"] > 100:
            return f"{c['class']}/{c['subclass']} at {c['pct_of_peak']:.3g} % of its roofline stated"
    for name, f in ((j.get("model") or {}).get("fields") or {}).items():
        v = f.get("value") if isinstance(f, dict) else None
        if name != "recompute_fraction" and isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0:
            return f"model.{name} {v} at {f.get('confidence')} confidence"
    return None


def _judge_result(case: Case, code: int, stdout: str, stderr: str) -> tuple[str | None, str]:
    if code != 0:
        return f"nonsense: exit {code} where a result was due", stderr.strip().splitlines()[0] if stderr.strip() else ""
    if "RuntimeWarning" in stderr:
        return "nonsense: a numpy warning on stderr", ""
    if case.argv == ("upload",):
        return (None, "") if stdout.strip() else ("nonsense: the upload stored nothing", "")
    if "--json" not in case.argv:
        if not stdout.strip():
            return "nonsense: no output", ""
        said = next((ln for ln in stderr.splitlines() if case.says in ln), None) if case.says else ""
        if said is None:
            return f"nonsense: nothing says {case.says!r}", ""
        if case.text_check and (why := case.text_check(stdout)):
            return f"nonsense: {why}", said
        return None, said
    try:
        j = json.loads(stdout, parse_constant=_strict)
    except ValueError as e:
        return ("nonsense: --json printed NaN or Infinity (strict parsers refuse them)" if "strict" in str(e)
                else "nonsense: --json printed no JSON document"), ""
    if case.argv[0] == "compare":
        why = case.check(j) if case.check else None
        return (f"nonsense: {why}", "") if why else (None, "")
    if not isinstance(j, dict) or not isinstance(j.get("summary"), dict) or not isinstance(j.get("run"), dict):
        return "nonsense: --json printed no analysis", ""
    if why := _impossible(j):
        return f"nonsense: {why}", ""
    warnings = j["run"].get("warnings") or []
    said = next((w for w in warnings + stderr.splitlines() if case.says in w), None) if case.says else ""
    if said is None:
        return f"nonsense: no warning says {case.says!r}", ""
    s = j["summary"]
    step = s.get("step_ms")
    if not isinstance(step, (int, float)) or not math.isfinite(step) or step <= 0:
        return f"nonsense: step {step}", said
    shares = s.get("breakdown_pct") or {}
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in shares.values()) or abs(sum(shares.values()) - 100) > 0.5:
        return f"nonsense: shares {shares}", said
    if case.check and (why := case.check(j)):
        return f"nonsense: {why}", said
    return None, said
