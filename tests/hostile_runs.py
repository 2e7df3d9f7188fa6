"""Committed runs damaged file by file and field by field, as real runs and real users damage them.

The generator walks what the run directory contract names (workbench.format.contract) in each of a few
committed runs of different kinds (a healthy CPU DDP run, a gloo timeout, out-of-memory errors with and
without a trace, a mixture of experts, a GPU run): every column of every CSV, every leaf of every JSON
file, and puts hostile values there — numbers that are not numbers (NaN, infinities, 400 digits,
"1e999", words), negative and impossibly large figures, mistyped JSON, terminal escape sequences —
beside damage of a whole run: a failed run whose manifest still says "running" or is gone, error texts
of a MiB on one line, stray files beside the contract's, a loss that goes NaN, a directory name holding
escapes. Nothing here lists inputs by hand: a new column, a new JSON key or a new committed run of
:data:`SOURCES` is damaged too.

Each case runs the CLI in this process (``workbench.cli.main.main``: the trace's per-rank frames come
from a cache made once per source, so a case costs its analysis, ~0.5 s) under a time limit, and
:func:`judge` says what went wrong, if anything: an exception out of ``main`` (a traceback), an exit
other than 0 and 2, an exit 2 that is not one line, a result past :data:`LIMIT_S`, a control character
printed raw, ``--json`` that strict parsers refuse, an impossible figure stated as a fact, a failed run
without a failure diagnosis, a NaN loss not named, a damaged value read without a word about its file.

CI runs a fixed sample (each field one hostile value, the values taken in turn); ``WORKBENCH_FUZZ=deep``
runs every value of every field. ``tests/load/test_hostile_runs.py`` runs the cases as tests and
RELIABILITY.md counts them per class.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
import signal
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tests.conftest import DATA, TRACES

DEEP = os.environ.get("WORKBENCH_FUZZ", "").lower() == "deep"
LIMIT_S = 30.0
"""What any case may take: a result or one clear line, within this."""

SOURCES = {
    "engine_ddp": TRACES / "engine_ddp",  # healthy, CPU, 2 ranks, every file of the contract but memory
    "failed_gloo_timeout": TRACES / "failed_gloo_timeout",  # a gloo timeout, 2 ranks, status and memory files
    "failed_oom_backward": TRACES / "failed_oom_backward",  # CPU out of memory in backward, with its trace
    "recompute_1p3b_b48_none": TRACES / "recompute_1p3b_b48_none",  # a GPU out of memory before any trace
    "engine_moe_skewed": TRACES / "engine_moe_skewed",  # a mixture of experts: experts_rank{r}.csv
    "gpu_tiny": DATA / "gpu_tiny",  # one H200 rank: kernels, NVML samples, the GPU's step clock
}
FAILED = {"failed_gloo_timeout", "failed_oom_backward", "recompute_1p3b_b48_none"}
FAILURE_IDS = {"job_failed", "out_of_memory"}

ESCAPES = "\x1b[2J\x1b[31mred\x1b]0;title\x07\x9b1;1H\rback\x08\x00"
"""A clear screen, a colour, a window title (OSC … BEL), an 8-bit CSI, a carriage return, a backspace, a NUL."""

# hostile values of a CSV cell (as written in the file) and of a JSON leaf (as json.dumps writes it)
CELL_VALUES = {
    "nan": "nan", "inf": "inf", "negative": "-5", "huge": "1e30", "digits_400": "9" * 400, "exp_999": "1e999",
    "word": "lots", "escapes": ESCAPES,
}
JSON_VALUES: dict[str, Any] = {
    "nan": math.nan, "inf": math.inf, "negative": -5, "huge": 1e30, "digits_400": 10**400, "exp_999": "1e999",
    "word": "lots", "escapes": ESCAPES, "list": [], "object": {}, "null": None,
}

WATCHDOG_LINE = ("[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={s}, OpType=ALLREDUCE, "
                 "NumelIn=16777216, NumelOut=16777216, Timeout(ms)=600000) ran for 600{r:03d} milliseconds before timing out. ")
LONG_TEXTS = {
    # what real ones carry: every rank's collective, one line
    "watchdog_1mib": lambda: _fill(lambda i: WATCHDOG_LINE.format(r=i % 4096, s=i), 1 << 20),
    "pg_nccl_1mib": lambda: _fill(lambda i: f"[PG ID 0 PG GUID 0(default_pg) Rank {i % 4096}] ProcessGroupNCCL's watchdog got "
                                            f"stuck for 480 seconds without making progress in monitoring enqueued collectives. ", 1 << 20),
    "traceback_1mib": lambda: "Traceback (most recent call last):\n" + _fill(
        lambda i: f'  File "/opt/train/model.py", line {i}, in forward\n    x = self.layers[{i}](x)\n', 1 << 20)
        + "RuntimeError: CUDA error: an illegal memory access was encountered",
    "oom_400_digits": lambda: ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate " + "9" * 400 + ".00 GiB. GPU 0 has a "
                               "total capacity of 79.19 GiB of which 46.50 MiB is free."),
    "timeout_400_digits": lambda: "RuntimeError: Timed out waiting " + "9" * 400 + "ms for recv operation to complete",
}


def _fill(piece: Callable[[int], str], size: int) -> str:
    out, n, i = [], 0, 0
    while n < size:
        s = piece(i)
        out.append(s)
        n += len(s)
        i += 1
    return "".join(out)[:size]


@dataclass(frozen=True)
class Damage:
    name: str
    klass: str
    source: str
    what: str
    apply: Callable[[Path], Path]
    """Edits the copied run directory (its argument); returns the path the command reads."""
    argv: tuple[str, ...] = ("analyze", "--json")
    failed: bool = False
    """The run failed: its verdict must carry a failure diagnosis."""
    nonfinite_loss: bool = False
    """A loss went non-finite: ``nonfinite_loss`` must be named."""
    expect_ids: frozenset = frozenset()
    """Diagnoses the result must carry (a non-finite gradient norm: ``training_instability``)."""
    names: str = ""
    """A damaged value was put in this file: a result must say a word about it (a warning naming the file)."""


# ---- walking the contract's files -----------------------------------------------------------------

def _json_leaves(doc: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(doc, dict):
        return [leaf for k, v in doc.items() for leaf in _json_leaves(v, path + (k,))] or [path]
    if isinstance(doc, list):
        return [leaf for i, v in enumerate(doc[:3]) for leaf in _json_leaves(v, path + (i,))] or [path]
    return [path]


def _set_leaf(doc: Any, path: tuple, value: Any) -> None:
    for k in path[:-1]:
        doc = doc[k]
    doc[path[-1]] = value


def _dump(doc: Any) -> str:
    return json.dumps(doc, indent=1)  # NaN and Infinity as Python writes them: what a hand edit in Python leaves


def _json_edit(file: str, path: tuple, value: Any):
    def apply(run: Path) -> Path:
        f = run / file
        doc = json.loads(f.read_text())
        if path:
            _set_leaf(doc, path, value)
        else:
            doc = value
        text = _dump(doc)
        if isinstance(value, str) and value == JSON_VALUES["exp_999"]:
            text = text.replace('"1e999"', "1e999")  # a JSON number past float: Python reads it as inf
        f.write_text(text)
        return run
    return apply


def _csv_edit(file: str, column: str, value: str, rows: slice):
    def apply(run: Path) -> Path:
        f = run / file
        with f.open(newline="") as fh:
            table = list(csv.DictReader(fh))
            cols = list(table[0]) if table else []
        for r in table[rows]:
            r[column] = value
        with f.open("w", newline="") as fh:
            w = csv.DictWriter(fh, cols)
            w.writeheader()
            w.writerows(table)
        return run
    return apply


def _pick(key: str, values: dict, deep: bool) -> list[str]:
    """The hostile values a field gets: all of them (deep), else one, taken in turn across fields."""
    names = list(values)
    return names if deep else [names[zlib.crc32(key.encode()) % len(names)]]


def _rank0(files: list[Path], pattern: str) -> list[Path]:
    return [f for f in files if re.fullmatch(pattern.format(rank=0).replace(".", r"\."), f.name)]


def field_damage(source: str, deep: bool = DEEP) -> list[Damage]:
    """Every column of the run's CSVs and every leaf of its JSON files (rank 0's), each given hostile values."""
    from workbench.format import contract

    run = SOURCES[source]
    files = sorted(p for p in run.iterdir() if p.is_file())
    out: list[Damage] = []
    failed = source in FAILED
    for pattern in (contract.STEPS, contract.NVML, contract.EXPERTS):
        for f in _rank0(files, pattern):
            with f.open(newline="") as fh:
                reader = csv.DictReader(fh)
                cols, n = reader.fieldnames or [], sum(1 for _ in reader)
            for col in cols:
                for v in _pick(f"{source}/{f.name}/{col}", CELL_VALUES, deep):
                    rows = slice(n // 2, n // 2 + 1) if col != "step" else slice(n // 2, None)
                    kw: dict = {"names": f.name}
                    if pattern == contract.STEPS and col in ("loss", "grad_norm"):
                        # what the training computed, not damage: a non-finite value is a finding, a large or
                        # (for a loss) negative one a value like any other
                        if v in ("nan", "inf", "exp_999"):
                            kw = {"nonfinite_loss": True} if col == "loss" else {"expect_ids": frozenset({"training_instability"})}
                        elif v == "huge" or (v == "negative" and col == "loss"):
                            kw = {}
                    out.append(Damage(f"{source}:{f.name}:{col}={v}", "run-directory files", source,
                                      f"`{f.name}` column `{col}` = {v} (a row)", _csv_edit(f.name, col, CELL_VALUES[v], rows),
                                      failed=failed, **kw))
    for pattern in (contract.MANIFEST, contract.STATUS, contract.MEMORY, contract.ENV):
        for f in _rank0(files, pattern):
            doc = json.loads(f.read_text())
            for leaf in _json_leaves(doc):
                key = ".".join(map(str, leaf))
                for v in _pick(f"{source}/{f.name}/{key}", JSON_VALUES, deep):
                    if leaf == ("schema_version",) or (f.name == contract.MANIFEST and leaf and leaf[0] == "status"):
                        continue  # a manifest without a version it can read is refused by design; status: see state_damage
                    out.append(Damage(f"{source}:{f.name}:{key}={v}", "run-directory files", source,
                                      f"`{f.name}` `{key}` = {v}", _json_edit(f.name, leaf, JSON_VALUES[v]), failed=failed))
    return out


# ---- damage of a whole run --------------------------------------------------------------------------

def _manifest_edit(edit: Callable[[dict], None]):
    def apply(run: Path) -> Path:
        f = run / "manifest.json"
        m = json.loads(f.read_text())
        edit(m)
        f.write_text(_dump(m))
        return run
    return apply


def _unlink(name: str):
    def apply(run: Path) -> Path:
        (run / name).unlink()
        return run
    return apply


def _status_error(text: str, manifest_too: bool):
    def apply(run: Path) -> Path:
        for f in sorted(run.glob("status_rank*.json"))[:1]:
            doc = json.loads(f.read_text())
            doc.update(error=text, exit_code=1)
            f.write_text(json.dumps(doc))
        if manifest_too:
            m = json.loads((run / "manifest.json").read_text())
            m.update(status="failed", exit_code=1, error="rank 0: " + text)
            for info in (m.get("ranks") or {}).values():
                if isinstance(info, dict) and info.get("rank") == 0:
                    info.update(error=text, exit_code=1)
            (run / "manifest.json").write_text(json.dumps(m))
        return run
    return apply


def state_damage(source: str) -> list[Damage]:
    """A failed run whose manifest lost the failure (the launcher was killed: "running"; no manifest at all;
    ``ranks: {}``), and error texts no parser expects, each on a run whose status files say how it ended."""
    run = SOURCES[source]
    out: list[Damage] = []
    has_status = any(run.glob("status_rank*.json"))
    if source in FAILED and has_status:
        def running(m):
            m["status"] = "running"
            for k in ("exit_code", "error", "end_utc", "ranks", "ranks_died"):
                m.pop(k, None)
        out += [
            Damage(f"{source}:manifest_running", "a run's state", source, "the manifest still says `running` (launcher killed), "
                   "the status files say how the ranks ended", _manifest_edit(running), failed=True),
            Damage(f"{source}:no_manifest", "a run's state", source, "no `manifest.json`: the status files alone",
                   _unlink("manifest.json"), failed=True),
            Damage(f"{source}:manifest_ranks_empty", "a run's state", source, "the manifest's `ranks: {}`",
                   _manifest_edit(lambda m: m.update(ranks={})), failed=True),
        ]
    if has_status:
        for name, text in LONG_TEXTS.items():
            out.append(Damage(f"{source}:error_{name}", "failure text", source,
                              f"rank 0's error (status file and manifest) is {name.replace('_', ' ')}",
                              _status_error(text(), manifest_too=True), failed=True))
            if source in FAILED:
                out.append(Damage(f"{source}:status_only_{name}", "failure text", source,
                                  f"rank 0's status file alone says {name.replace('_', ' ')}",
                                  _status_error(text(), manifest_too=False), failed=True))
    return out


def _stray(make: Callable[[Path], None]):
    def apply(run: Path) -> Path:
        make(run)
        return run
    return apply


def _copy_as(src: str, dst: str):
    def make(run: Path) -> None:
        if (run / src).exists():
            shutil.copy(run / src, run / dst)
    return make


def file_damage(source: str) -> list[Damage]:
    """Files beside the contract's that are not its (``steps_rankX.csv``, ``memory_rank.json``, a status file
    of a rank the job did not have), and the run's own files emptied or cut mid-row."""
    run = SOURCES[source]
    failed = source in FAILED
    out = []
    for name, what, make in (
        ("stray_steps_rankX", "a stray `steps_rankX.csv` (a copy of rank 0's)", _copy_as("steps_rank0.csv", "steps_rankX.csv")),
        ("stray_memory_rank", "a stray `memory_rank.json`", lambda r: (r / "memory_rank.json").write_text('{"oom": "x"}')),
        ("stray_nvml_rank_minus1", "a stray `nvml_rank-1.csv` (a copy of rank 0's)", _copy_as("nvml_rank0.csv", "nvml_rank-1.csv")),
        ("stray_status_rank_huge", "`status_rank99999999999.json`: a rank past any job's",
         lambda r: (r / "status_rank99999999999.json").write_text('{"rank": 99999999999, "exit_code": 1, "error": "x"}')),
    ):
        out.append(Damage(f"{source}:{name}", "stray files", source, what, _stray(make), failed=failed))
    for f in sorted(p.name for p in run.iterdir() if p.is_file() and p.suffix in (".csv", ".json") and "rank0" in p.name):
        out.append(Damage(f"{source}:empty_{f}", "run-directory files", source, f"`{f}` empty",
                          _stray(lambda r, f=f: (r / f).write_text("")), failed=failed))
        out.append(Damage(f"{source}:cut_{f}", "run-directory files", source, f"`{f}` cut in the middle",
                          _stray(lambda r, f=f: (r / f).write_bytes((r / f).read_bytes()[: (r / f).stat().st_size // 2])),
                          failed=failed))
    return out


def _nan_loss(rank: int, from_row: int):
    def apply(run: Path) -> Path:
        f = run / f"steps_rank{rank}.csv"
        with f.open(newline="") as fh:
            table = list(csv.DictReader(fh))
            cols = list(table[0])
        for r in table[min(from_row, len(table) - 1):]:  # a run of one recorded step: that step
            r["loss"] = "nan"
        with f.open("w", newline="") as fh:
            w = csv.DictWriter(fh, cols)
            w.writeheader()
            w.writerows(table)
        return run
    return apply


def _rename(name: str):
    def apply(run: Path) -> Path:
        new = run.parent / name
        run.rename(new)
        return new
    return apply


def figure_damage(source: str) -> list[Damage]:
    """A loss that goes NaN, a run directory named with escapes, and the planner on the damaged run."""
    run = SOURCES[source]
    failed = source in FAILED
    out = []
    steps = run / "steps_rank0.csv"
    if steps.exists() and "loss" in steps.read_text().splitlines()[0].split(",") and any(
            r.get("loss") for r in csv.DictReader(steps.open())):
        rank = 1 if (run / "steps_rank1.csv").exists() else 0
        out.append(Damage(f"{source}:loss_nan", "a loss that is not a number", source,
                          f"rank {rank}'s loss is `nan` from its fourth step on", _nan_loss(rank, 3), failed=failed,
                          nonfinite_loss=True))
    out.append(Damage(f"{source}:escaped_dir_name", "text from a run", source, "the run directory's name holds escapes",
                      _rename("run" + ESCAPES.replace("\x00", "").replace("/", "")), argv=("analyze",), failed=failed))
    out.append(Damage(f"{source}:from_run_twice", "text from a run", source, "`plan --from-run`, then `analyze`, "
                      "of the run with escapes in its name", _rename("run" + ESCAPES.replace("\x00", "")),
                      argv=("plan", "--from-run"), failed=failed))
    return out


def cases(deep: bool = DEEP) -> list[Damage]:
    """Every case the generator makes of :data:`SOURCES` (each field one hostile value; every value with
    ``deep``, ``WORKBENCH_FUZZ=deep``)."""
    out = []
    for source in SOURCES:
        out += state_damage(source) + file_damage(source) + figure_damage(source) + field_damage(source, deep)
    assert len({c.name for c in out}) == len(out)
    return out


HANDLED = {
    "run-directory files": "every cell of the contract's CSVs (steps, NVML samples, expert load) and every field of its JSON "
                           "records (status, memory) is checked at load (`workbench/load/run_files.py`; the manifest by "
                           "`workbench/format/manifest.py`): a value no capture writes (not a number, not finite, negative, past "
                           "what a machine holds, mistyped) is left out with one warning naming the file, the column or key and "
                           "the first bad value (escaped); a row without a step is dropped; an empty or cut file is read as far as "
                           "it goes or left out with a warning; allocated above reserved is inconsistent evidence, left out",
    "failure text": "parsed in linear time (`workbench/analysis/failure.py`): each message is cut to its first and last 32 KiB "
                    "(the kind of failure is said at the head, an out-of-memory's figures at the tail) and every pattern is "
                    "anchored on words with bounded repeats; a figure past 18-20 digits is not read (the kind of failure "
                    "still is); out-of-memory figures that contradict the device (free above capacity, allocated above "
                    "reserved) are left out and named; the verdict is the failure",
    "a run's state": "the ranks' status files are read whatever the manifest says, and without one "
                     "(`workbench/load/state.py`): a rank that exited non-zero or recorded an error makes the run failed, "
                     "a warning names the evidence that disagreed; the verdict is `job_failed` or `out_of_memory`, never "
                     "a healthy one",
    "stray files": "a file named like the contract's but not by it (`steps_rankX.csv`, `memory_rank.json`, `nvml_rank-1.csv`), "
                   "or of a rank past the job's world, is ignored with a note that names it",
    "text from a run": "control characters and escape sequences (ESC, an 8-bit CSI, BEL, a carriage return, bidirectional "
                       "overrides) are shown as `\\xNN` escapes in every output (`workbench/format/printable.py`: the "
                       "terminal's lines, the error line, the HTML report, the app's pages); a traceback keeps its line "
                       "breaks",
    "a loss that is not a number": "`nan` and `inf` in a loss are kept apart from an empty cell at load; `nonfinite_loss` "
                                   "(critical) names the first step and rank",
}
"""How each class is handled (RELIABILITY.md's table)."""

QUOTA = {"run-directory files": 2, "failure text": 1, "stray files": 2, "text from a run": 2, "a run's state": 3,
         "a loss that is not a number": 1}
"""Cases CI runs of each class of each source, and of each file for damage to one of its fields (~117 in all, a
stable pick): the generator makes ~1,100, a manifest leaf each, ~0.5 s of CPU a case. A MiB error text costs
seconds a case, so CI runs one per source (the texts taken in turn); tests/analysis/test_failure.py times each
text's parse beside an ordinary traceback."""


def ci_cases() -> list[Damage]:
    """What CI runs: of each class of each source, :data:`QUOTA` cases (a stable pick: the same cases on
    every machine; ``WORKBENCH_FUZZ=deep``: every case)."""
    every = cases()
    if DEEP:
        return every
    groups: dict[tuple, list[Damage]] = {}
    for c in every:
        file = c.name.split(":")[1] if c.klass == "run-directory files" and c.name.count(":") >= 2 else ""
        groups.setdefault((c.klass, c.source, file), []).append(c)
    out = []
    for (klass, _, _), group in groups.items():
        out += sorted(group, key=lambda c: zlib.crc32(c.name.encode()))[:QUOTA[klass]]
    return sorted(out, key=lambda c: every.index(c))


# ---- running a case -------------------------------------------------------------------------------

class _Late(Exception):
    pass


def _alarm(signum, frame):
    raise _Late()


def run_cli(argv: list[str]) -> tuple[int | str, str, str, float]:
    """``workbench ARGV`` in this process: (exit code, or ``traceback: …`` / ``late``; stdout; stderr; seconds)."""
    from workbench.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    start = time.monotonic()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, LIMIT_S)
    try:
        code: int | str = main(argv)
    except _Late:
        code = "late"
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 2
    except BaseException as e:  # noqa: BLE001 - a traceback is what this looks for
        import traceback

        code = f"traceback: {type(e).__name__}: {str(e)[:200]}"
        err.write(traceback.format_exc())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        sys.stdout, sys.stderr = saved
    return code, out.getvalue(), err.getvalue(), time.monotonic() - start


RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""What a terminal acts on instead of printing: C0 but tab and newline, DEL, C1, bidirectional overrides."""


@dataclass
class Verdict:
    code: int | str
    problem: str | None
    message: str  # the one error line, or the warning that names the damaged file
    seconds: float
    outputs: dict = field(default_factory=dict)


def _strict(token: str):
    raise ValueError(f"{token}: not strict JSON")


def _said_about(damage: Damage, doc: dict, err: str) -> str | None:
    warnings = (doc.get("run") or {}).get("warnings") or []
    return next((w for w in warnings + err.splitlines() if damage.names in w), None)


MAY_BE_ZERO = {"recompute_fraction", "shared_experts", "dense_layers", "moe_layers"}
"""Model fields a real model holds as 0 (no shared expert, every layer a mixture of experts)."""


def impossible(doc: dict) -> str | None:
    """A figure past its physical bound stated as fact in an ``analyze --json`` document: MFU/HFU or a
    class's % of roofline above 100, a model size of 0 or less, a share outside 0-100, a negative time,
    rate or count, memory by category beyond the device (where no warning calls the evidence inconsistent)."""
    e = doc.get("efficiency") or {}
    for k in ("mfu_pct", "mfu_bf16_pct", "hfu_pct", "hfu_bf16_pct"):
        if isinstance(e.get(k), (int, float)) and not 0 <= e[k] <= 100:
            return f"efficiency.{k} {e[k]:.3g} % stated"
    for c in e.get("classes") or []:
        if isinstance(c.get("pct_of_peak"), (int, float)) and c["pct_of_peak"] > 100:
            return f"{c['class']}/{c['subclass']} at {c['pct_of_peak']:.3g} % of its roofline stated"
    for name, f in ((doc.get("model") or {}).get("fields") or {}).items():
        v = f.get("value") if isinstance(f, dict) else None
        if isinstance(v, (int, float)) and not isinstance(v, bool) and (v < 0 or v == 0 and name not in MAY_BE_ZERO):
            return f"model.{name} {v} at {f.get('confidence')} confidence"
    s = doc.get("summary") or {}
    for k, v in (s.get("breakdown_pct") or {}).items():
        if isinstance(v, (int, float)) and not -0.5 <= v <= 100.5:
            return f"summary.breakdown_pct.{k} {v}"
    for k in ("step_ms", "gpu_busy_pct", "exposed_comm_pct", "tokens_per_s"):
        v = s.get(k)
        if isinstance(v, (int, float)) and v < 0:
            return f"summary.{k} {v}"
    mem = doc.get("memory") or {}
    cap = mem.get("capacity_gib")
    flagged = " ".join((doc.get("run") or {}).get("warnings") or [])
    for cat, v in (mem.get("by_category") or {}).items():
        gib = v.get("gib") if isinstance(v, dict) else None
        if isinstance(gib, (int, float)) and (gib < 0 or (cap and mem.get("at") != "planned" and gib > cap * 1.01)) \
                and "inconsistent" not in flagged:
            return f"memory.by_category.{cat} {gib} GiB of a {cap} GiB device stated"
    return None


def judge(damage: Damage, code, out: str, err: str, seconds: float, argv: list[str]) -> tuple[str | None, str]:
    if code == "late" or seconds > LIMIT_S:
        return f"late: {seconds:.1f} s", ""
    if isinstance(code, str):
        return code, ""
    if code not in (0, 2):
        return f"exit {code}", ""
    for name, text in (("stdout", out), ("stderr", err)):
        if m := RAW_CONTROL.search(text):
            return f"a raw {m.group()!r} on {name}", ""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if code == 2:
        errors = [ln for ln in lines if ln.startswith("workbench: error:")]
        if len(errors) != 1:
            return f"exit 2 with {len(errors)} error lines", lines[0] if lines else ""
        return None, errors[0]
    if "--json" not in argv:
        if not out.strip():
            return "no output", ""
        if damage.failed and argv[0] == "analyze" and not re.search(r"job_failed|out_of_memory", out):
            return "a failed run's verdict names no failure", ""
        return None, ""
    try:
        doc = json.loads(out, parse_constant=_strict)
    except ValueError as e:
        return f"--json: {e}", ""
    if argv[0] != "analyze":
        return None, ""
    if why := impossible(doc):
        return f"impossible: {why}", ""
    ids = {d["id"] for d in doc.get("diagnoses") or []}
    if damage.failed and not ids & FAILURE_IDS:
        return f"a failed run called {sorted(ids) or 'healthy'}", ""
    if damage.nonfinite_loss and "nonfinite_loss" not in ids:
        return "a NaN loss not named", ""
    if missing := damage.expect_ids - ids:
        return f"{', '.join(sorted(missing))} not named", ""
    said = ""
    if damage.names:
        said = _said_about(damage, doc, err)
        if said is None:
            return f"nothing says a word about {damage.names}", ""
    return None, said


def observe(damage: Damage, workdir: Path, cache: Path) -> Verdict:
    """Copy the damage's source (with its analysis cache, made once under ``cache``) under ``workdir``,
    damage it, run its command (and ``analyze`` in text too where the command was ``--json``), judge."""
    src = SOURCES[damage.source]
    base = cache / damage.source
    if not base.exists():
        shutil.copytree(src, base, ignore=shutil.ignore_patterns(".workbench-cache", "console.log"))
        run_cli(["analyze", "--json", str(base)])  # the per-rank frames, reused by every case of this source
    run = workdir / "run"
    shutil.copytree(base, run, ignore=shutil.ignore_patterns("analysis*.json"))
    target = damage.apply(run)
    argvs = [[*damage.argv, str(target)]]
    if damage.argv == ("analyze", "--json"):
        argvs.append(["analyze", str(target)])
    if damage.argv == ("plan", "--from-run"):
        argvs.append(["analyze", str(target)])
    total = 0.0
    outputs = {}
    message = ""
    for argv in argvs:
        code, out, err, seconds = run_cli(argv)
        total += seconds
        outputs[" ".join(argv[:-1])] = (code, out[-2000:], err[-2000:])
        problem, said = judge(damage, code, out, err, seconds, argv)
        message = message or said
        if problem:
            return Verdict(code, f"{' '.join(argv[:-1])}: {problem}", message.replace(str(workdir), "DIR"), total, outputs)
    return Verdict(outputs[" ".join(argvs[0][:-1])][0], None, message.replace(str(workdir), "DIR"), total, outputs)


__all__ = ["CELL_VALUES", "Damage", "ESCAPES", "JSON_VALUES", "LIMIT_S", "SOURCES", "Verdict", "cases", "ci_cases", "judge",
           "observe", "run_cli"]
