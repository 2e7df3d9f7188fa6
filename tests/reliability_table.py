"""Hostile inputs and injected faults, and the table of their observed outcomes in RELIABILITY.md.

Each hostile input is a function that builds a run directory from committed real traces (or from
bytes written here); :func:`observe` runs ``python -m workbench analyze --json DIR`` on it as a
user would and keeps the exit code, the first stderr line and, on success, what was analysed.
``tests/load/test_reliability.py`` renders the table from those observations and checks that
RELIABILITY.md says the same (``WORKBENCH_WRITE_RELIABILITY=1`` rewrites the file).

Faults that need a real training job are covered by other tests; :data:`COVERED_ELSEWHERE` names
each test node and the outcome it asserts, and the test checks that every named node still
collects, so the table cannot outlive its tests.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import TRACES

ROOT = Path(__file__).resolve().parents[1]
RELIABILITY_MD = ROOT / "RELIABILITY.md"
WRITE_ENV = "WORKBENCH_WRITE_RELIABILITY"
REAL_RUN = "engine_ddp"  # a committed 2-rank gloo run: 4.6 MB of Kineto JSON per rank, 12k events


@dataclass(frozen=True)
class Outcome:
    how: str  # "CLI" (a subprocess) or "in-process" (where the CLI cannot set the condition)
    exit_code: int | str
    message: str  # the first stderr line, tmp paths replaced by DIR
    kept: str  # what was analysed (exit 0), or what the error left behind

    def cells(self) -> list[str]:
        return [self.how, str(self.exit_code), f"`{self.message}`" if self.message else "", self.kept]


def real_text(rank: int = 0, run: str = REAL_RUN) -> bytes:
    return gzip.decompress((TRACES / run / f"rank{rank}.pt.trace.json.gz").read_bytes())


def _copy(d: Path, run: str, rank: int, name: str | None = None) -> None:
    shutil.copy(TRACES / run / f"rank{rank}.pt.trace.json.gz", d / (name or f"rank{rank}.pt.trace.json.gz"))


def _edited_events(d: Path, edit) -> None:
    """Rank 0 of the real run with ``edit(events)`` applied, written as Python's json does
    (NaN becomes the bare token ``NaN``, which strict JSON parsers refuse)."""
    doc = json.loads(real_text())
    edit(doc["traceEvents"])
    (d / "rank0.pt.trace.json").write_text(json.dumps(doc))


def _ops(events):
    return [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]


def _nan_dur(events):
    for e in _ops(events)[::10]:
        e["dur"] = math.nan


def _negative_dur(events):
    for e in _ops(events)[::10]:
        e["dur"] = -abs(e["dur"]) - 1


def _overlapping(events):
    # every op also appears again, shifted by half its duration: same-thread ranges overlap
    events += [dict(e, ts=e["ts"] + e["dur"] / 2) for e in _ops(events)]


def _manifest(d: Path, text: str) -> None:
    for f in (TRACES / REAL_RUN).iterdir():
        if f.is_file():  # not the analysis cache (.workbench-cache/) an earlier analysis left there
            shutil.copy(f, d / f.name)
    (d / "manifest.json").write_text(text)


def _newer_schema(d: Path) -> None:
    m = json.loads((TRACES / REAL_RUN / "manifest.json").read_text())
    _manifest(d, json.dumps(dict(m, schema_version=999)))


def _non_pytorch(d: Path) -> None:
    # a browser/TensorFlow-style Chrome trace: valid, complete events, no PyTorch names or steps
    events = [{"ph": "X", "name": f"task_{i % 7}", "cat": "app", "pid": 1, "tid": 1 + i % 2,
               "ts": i * 100.0, "dur": 80.0} for i in range(200)]
    (d / "rank0.pt.trace.json").write_text(json.dumps({"traceEvents": events}))


def _sparse(d: Path) -> None:
    with open(d / "rank0.pt.trace.json", "wb") as f:
        f.truncate(9 << 30)  # sparse: 9 GiB of size, no disk blocks


def _corrupt_gzip(d: Path) -> None:
    data = bytearray((TRACES / REAL_RUN / "rank0.pt.trace.json.gz").read_bytes())
    for i in range(1000, len(data) - 1000, 997):  # deterministic flips through the deflate stream
        data[i] ^= 0xFF
    (d / "rank0.pt.trace.json.gz").write_bytes(bytes(data))


def _truncated_gzip(d: Path) -> None:
    data = (TRACES / REAL_RUN / "rank0.pt.trace.json.gz").read_bytes()
    (d / "rank0.pt.trace.json.gz").write_bytes(data[: len(data) // 2])


def _multi_member_gzip(d: Path) -> None:
    # what `cat a.gz b.gz c.gz` gives: one valid gzip file that gzip.open and zcat read whole
    for r in (0, 1):
        text = real_text(r)
        cuts = [0, len(text) // 3, 2 * len(text) // 3, len(text)]
        (d / f"rank{r}.pt.trace.json.gz").write_bytes(b"".join(gzip.compress(text[a:b]) for a, b in zip(cuts, cuts[1:])))


def _w(name: str, data: bytes):
    return lambda d: (d / name).write_bytes(data)


# name → (what it is, builder of the run directory)
HOSTILE: dict[str, tuple[str, object]] = {
    "baseline": ("the committed run, unmodified (for comparison)", lambda d: [_copy(d, REAL_RUN, r) for r in (0, 1)]),
    "empty_dir": ("a directory with nothing in it", lambda d: None),
    "empty_file": ("an empty `rank0.pt.trace.json`", _w("rank0.pt.trace.json", b"")),
    "truncated_gzip": ("a real trace's gzip cut in half", _truncated_gzip),
    "corrupt_gzip": ("a real trace's gzip with bytes flipped every 997", _corrupt_gzip),
    "multi_member_gzip": ("the run's traces re-gzipped as 3 members each (`cat a.gz b.gz c.gz`)", _multi_member_gzip),
    "invalid_json": ("a trace cut inside its JSON (`{\"traceEvents\": [{\"ph\": \"X\",`)",
                     _w("rank0.pt.trace.json", b'{"traceEvents": [{"ph": "X",')),
    "not_a_trace_object": ("JSON that is not a trace: `{\"a\": 1}`", _w("rank0.pt.trace.json", b'{"a": 1}')),
    "list_of_numbers": ("JSON that is not a trace: `[1, 2, 3]`", _w("rank0.pt.trace.json", b"[1, 2, 3]")),
    "non_pytorch_chrome_trace": ("a valid Chrome trace without PyTorch events (200 `X` events)", _non_pytorch),
    "sparse_9gib_file": ("a 9 GiB sparse `rank0.pt.trace.json` (`truncate -s 9G`)", _sparse),
    "duplicate_ranks": ("the same rank-0 trace twice under two names",
                        lambda d: [_copy(d, REAL_RUN, 0, f"{p}_rank0.pt.trace.json.gz") for p in "ab"]),
    "mixed_jobs": ("rank 0 of `engine_ddp` with rank 1 of `ddp_slow_data`",
                   lambda d: (_copy(d, REAL_RUN, 0), _copy(d, "ddp_slow_data", 1))),
    "nan_durations": ("rank 0 with every 10th op's `dur` = `NaN`", lambda d: _edited_events(d, _nan_dur)),
    "negative_durations": ("rank 0 with every 10th op's `dur` negative", lambda d: _edited_events(d, _negative_dur)),
    "overlapping_durations": ("rank 0 with every op duplicated, shifted by half its duration",
                              lambda d: _edited_events(d, _overlapping)),
    "newer_schema_version": ("the run with `schema_version: 999` in its manifest", _newer_schema),
    "manifest_not_json": ("the run with `manifest.json` = `{oops`", lambda d: _manifest(d, "{oops")),
    "renamed_traces": ("the run's traces as HTA names them (`rank-0.json.gz`, `rank-1.json.gz`) beside a `notes.json`",
                       lambda d: ([_copy(d, REAL_RUN, r, f"rank-{r}.json.gz") for r in (0, 1)],
                                  (d / "notes.json").write_text('{"lr": 0.1}'))),
    "only_foreign_json": ("no trace: a `config.json` and a `trace.json.gz` that is not gzip",
                          lambda d: ((d / "config.json").write_text("{}"), (d / "trace.json.gz").write_bytes(b"\x1f\x8bnot gzip"))),
}


def _kept(stdout: str) -> str:
    j = json.loads(stdout)
    run, summary = j["run"], j["summary"]
    ranks = [r["rank"] for r in summary["per_rank"]]
    parts = [f"ranks {ranks}, {summary['steps']} steps, {len(j['diagnoses'])} diagnoses"]
    parts += [f"warning: {w.split(':')[0]}" for w in run["warnings"]]
    return "; ".join(parts)


def observe(name: str, d: Path) -> Outcome:
    """Build the hostile input ``name`` in the empty directory ``d`` and analyse it with the CLI."""
    HOSTILE[name][1](d)
    r = subprocess.run([sys.executable, "-m", "workbench", "analyze", "--json", str(d)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    lines = r.stderr.strip().splitlines()
    message = lines[0].replace(str(d), "DIR") if lines else ""
    kept = _kept(r.stdout) if r.returncode == 0 else ("traceback" if "Traceback" in r.stderr else "nothing (refused)")
    return Outcome("CLI", r.returncode, message, kept)


# Faults that need a real job, each covered by a test elsewhere: (fault, test node, asserted outcome).
COVERED_ELSEWHERE: list[tuple[str, str, str]] = [
    ("the run directory's disk fills up while capturing (a 48 KB tmpfs)",
     "tests/capture/test_disk_full.py::test_disk_full_while_capturing_keeps_training_and_what_was_written",
     "exit 0 (the script's: it trains to the end); one line per file that could not be written (the trace, the status, "
     "the manifest update), no traceback, no temporary file left; the manifest stays whole and the steps rows "
     "already written are kept. A status file that did not fit reads as `ranks_died` in the manifest (not told apart yet)"),
    ("the analysis cache's disk is full", "tests/capture/test_disk_full.py::test_analysis_on_a_full_cache_disk_still_answers",
     "exit 0 with the verdict; the cache is skipped"),
    ("script raises after the profiled cycle", "tests/capture/test_profile.py::test_crash_keeps_completed_cycle_and_records_failure",
     "exit 1 (the script's); manifest `status: failed` with the error; the completed cycle's trace and steps kept; analyze exits 0"),
    ("script raises inside the profiled window", "tests/capture/test_profile.py::test_crash_inside_the_profiled_window_keeps_the_partial_trace",
     "the partial trace of the window is kept and loads"),
    ("SIGTERM / SIGHUP to `workbench profile`", "tests/capture/test_signals.py::test_signal_ends_the_run_cleanly_and_keeps_the_capture",
     "exit 128+signal; `status: interrupted`; trace and steps kept; no stray processes; SIGTERM still prints the verdict"),
    ("SIGINT twice, and again during the verdict", "tests/capture/test_signals.py::test_sigint_twice_and_again_during_the_verdict",
     "exit 130, no traceback; the run is kept"),
    ("SIGTERM through torchrun to every rank", "tests/capture/test_signals.py::test_sigterm_reaches_every_rank_through_torchrun",
     "every rank saves its trace"),
    ("one rank SIGKILLed mid-run", "tests/capture/test_signals.py::test_a_rank_killed_mid_run_stops_the_job_and_is_named",
     "exit ≠ 0; `status: failed`, `ranks_died: [1]`, error `rank 1 died without reporting`; rank 0's trace kept; job ends < 25 s"),
    ("upload over the size limit; zip bomb upload", "tests/ui/test_uploads.py::test_oversize_upload_and_zip_bomb",
     "`UploadError` (`limit`, `unpacks to more than`); nothing written"),
    ("zip upload whose header lies about sizes", "tests/ui/test_uploads.py::test_zip_with_lying_header_is_stopped_while_reading",
     "stopped while reading; nothing written"),
    ("NVML query raising mid-run", "tests/load/test_reliability.py::test_nvml_failing_mid_run_keeps_earlier_rows",
     "the sampler thread keeps running, rows read before the failure are kept, failing reads write no row, `stop()` is clean"),
]


INTRO = """# Reliability

What `workbench` does with hostile inputs and injected faults, as observed by the tests. This file
is checked by `tests/load/test_reliability.py` (part of `make test`): the hostile-input table is
rebuilt from what the test observes and must equal this file. Regenerate it with

    WORKBENCH_WRITE_RELIABILITY=1 python3 -m pytest tests/load/test_reliability.py -m slow -q

Beyond these rows, `tests/load/test_reliability.py` fuzzes the loader with hypothesis (random event
streams with missing/NaN/negative/huge/mistyped fields, duplicate and overlapping events, and
headers whose `distributedInfo`, `pg_config`, `deviceProperties` and `baseTimeNanoseconds` are
mistyped; random truncations and byte flips of a real trace, plain and gzipped): `read_trace`
returns a trace or raises the one-line `TraceError`, and `analyze_run` on whatever loads returns or
raises a one-line `WorkbenchError` — never anything else. A header field that does not fit is
dropped (an int-like `"rank": "1"` is read as 1), never the trace. Property-based fuzzing covers
the other inputs too: the manifest (`tests/format/test_manifest.py`, and beside real traces through
the whole analysis: `tests/load/test_manifest_fuzz.py`), plan files (`tests/plan/test_plan_file_bounds.py`:
their numbers read or fail in one line, never past the schema or the physics) and the CLI's printed
text (`tests/cli/test_markup.py`: text holding Rich markup in every string field of a verdict, a
comparison and a plan prints as written). The generated corpus below tries each class of hostile
input as an attacker would and counts what came of it.
"""


def _table(header: list[str], rows: list[list[str]]) -> str:
    esc = [[c.replace("|", "\\|") for c in r] for r in rows]
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(r) + " |" for r in esc])


CORPUS_INTRO = """## Generated hostile corpus (`tests/hostile_corpus.py`)

Built at test time from committed traces (the multi-GB inputs as one gzip member compressed once and
written many times: milliseconds and a few MB of disk), each case run as a user would (`analyze
--json`, `analyze`, `report`, `plan --from-run`/`--calibrate`, the app's upload through
`tests/scripts/upload_one.py`) in a subprocess under a 3 GiB address-space limit and a time limit;
`tests/load/test_hostile_corpus.py` runs each as a test. A **traceback** is an exit other than 0 and 2 or
`Traceback` on stderr; a **hang** a run past its limit; **silent nonsense** an exit 0 where an error
was due, a result whose warnings (or stderr) do not name what was implausible, a non-finite step,
shares that do not sum to 100, a numpy warning, a peak over 2 GB, `--json` that a strict parser
refuses (`NaN`, `Infinity`), an impossible figure stated (MFU or HFU above 100 %, a class above 100 %
of its roofline, a model size of 0), text from the run not printed as written, a file left behind by
a failed write, or numbers that fail the case's own check (steps counted, the step within 1 % of the
unmodified trace's 15.6 ms, the same diagnoses, the GPU's own step within 10 %, the ranks a partial
run lacks, the mismatches `compare` names). Peak RSS (`wait4`) and times are this 2-core machine's at the last
regeneration; the check of this file does not compare them.
"""


def _mb(v: float) -> str:
    return f"{v:.0f} MB"


def render_corpus(observed: dict) -> str:
    """The corpus section: counts per class (cases, tracebacks, hangs, silent nonsense, refused,
    answered; peak RSS and the slowest case), then one row per case."""
    from tests.hostile_corpus import BY_NAME

    classes: dict[str, list] = {}
    for name, o in observed.items():
        classes.setdefault(BY_NAME[name].klass, []).append(o)
    head = ["class", "cases", "tracebacks", "hangs", "silent nonsense", "refused (exit 2)", "answered (exit 0)", "peak RSS", "slowest"]

    def row(label, obs):
        return [label, str(len(obs)), *(str(sum(o.kind == k for o in obs)) for k in ("traceback", "hang", "nonsense")),
                str(sum(o.exit_code == 2 for o in obs)), str(sum(o.exit_code == 0 for o in obs)),
                _mb(max(o.rss_mb for o in obs)), f"{max(o.seconds for o in obs):.1f} s"]

    summary = [row(k, v) for k, v in classes.items()] + [row("**all**", list(observed.values()))]
    cases = []
    for name, o in observed.items():
        c = BY_NAME[name]
        msg = o.message if len(o.message) <= 240 else o.message[:239] + "…"
        cases.append([f"`{name}`", c.klass, c.what, f"`{' '.join(c.argv).replace(str(ROOT) + '/', '')}`", str(o.exit_code), f"`{msg}`" if msg else "",
                      o.problem or "ok", _mb(o.rss_mb), f"{o.seconds:.1f} s"])
    return "\n".join([CORPUS_INTRO, _table(head, summary), "",
                      _table(["case", "class", "input", "command", "exit", "message (exit 2) or the warning that names it",
                              "outcome", "peak RSS", "time"], cases)])


_MEASURED = re.compile(r"\b\d+(?:\.\d+)? (?:MB|s)\b")


def comparable(text: str) -> str:
    """``text`` with the measured peaks and times masked: they vary from run to run."""
    return _MEASURED.sub("#", text)


DAMAGE_INTRO = """## Damaged committed runs (`tests/hostile_runs.py`)

Generated at test time from committed runs of six kinds (a healthy CPU DDP run, a gloo timeout, out-of-memory
errors with and without a trace, a mixture of experts, a GPU run): every column of every CSV and every leaf of
every JSON file the run directory contract names, each given hostile values (NaN, infinities, 400 digits,
`1e999`, words, negative and impossibly large figures, mistyped JSON, terminal escapes), and damage of a whole
run (a manifest that still says `running`, none at all, error texts of a MiB on one line, stray files, a NaN
loss, escapes in the directory's name, `plan --from-run` then `analyze`). Each case runs `analyze --json`,
`analyze` (or `plan --from-run`) in-process; `tests/load/test_hostile_runs.py` requires of every case: a
result or one clear line with exit 2, within 30 s, no traceback, no raw control character, strict JSON, no
impossible figure stated as fact (MFU or a share past 100 %, a negative time, memory by category beyond the
device unless a warning calls it inconsistent), a failed run's verdict a failure, a NaN loss named, a damaged
value named in a warning. CI runs a stable sample; `WORKBENCH_FUZZ=deep` runs every case.
"""


def render_damage() -> str:
    """The damaged-runs section: per class, the cases generated, those CI runs, how they are handled."""
    from tests import hostile_runs as hr

    deep, every = hr.cases(deep=True), hr.cases(deep=False)
    names = {x.name for x in hr.ci_cases()}
    ci = [c for c in every if c.name in names]
    rows = [[k, *(str(sum(c.klass == k for c in group)) for group in (deep, ci)), how] for k, how in hr.HANDLED.items()]
    rows.append(["**all**", str(len(deep)), str(len(ci)), ""])
    return "\n".join([DAMAGE_INTRO, _table(["class", "cases (`WORKBENCH_FUZZ=deep`)", "in CI", "how it is handled"], rows)])


CONDITIONS = [
    ("mixed GPUs in one run", "each rank's device is read from its trace; ranks on different GPU models are named in a "
     "warning (`mixed devices: … MFU and the roofline use <rank 0's GPU>'s peaks for every rank`), in `run.devices` of "
     "`--json` and in the verdict (`ranks on N GPU models`); `compare` of runs on different GPUs says they are not like "
     "for like", "`tests/hostile_corpus.py` cases `mixed_gpus`, `compare_other_gpu`"),
    ("a closed stdout, a full disk under it, a reader that left", "`workbench analyze RUN >&-` and `> /dev/full`: one clear "
     "line, exit 2 (`stdout is closed: …`, `cannot write the result (No space left on device) …`); `| head`: exit 0, "
     "nothing on stderr; a profiled script that closes its own stdout and stderr trains on and its run is kept",
     "`tests/cli/test_closed_stdout.py`; the corpus case `script_closes_stdio`"),
    ("very many ranks", "at most 1,024 trace files are analysed at once (`WORKBENCH_MAX_RANKS` raises it): past that one "
     "clear line says so before any is read; each rank is reduced to small summary frames (in worker processes where the "
     "traces are large) and only summaries are merged; an uploaded zip of more members than a 1,024-rank run has is "
     "refused while reading its directory", "`tests/hostile_corpus.py` cases `ranks_10000`, `upload_zip_25000_members`"),
]
"""Conditions handled and tested elsewhere: (condition, how it is handled, where it is tested)."""


def render(observed: dict[str, Outcome], extra: list[tuple[str, str, Outcome]], not_tested: list[tuple[str, str]],
           known: list[tuple[str, str]], open_bugs: list[tuple[str, str]] = (), corpus: dict | None = None) -> str:
    """RELIABILITY.md from the observed outcomes (``extra``: rows observed without the CLI;
    ``open_bugs``: (strict-xfail test, failure) of bugs known and not fixed yet; ``corpus``: case
    name → tests.hostile_corpus.Observed)."""
    rows = [[f"`{n}`", HOSTILE[n][0], *observed[n].cells()] for n in HOSTILE]
    rows += [[f"`{n}`", what, *o.cells()] for n, what, o in extra]
    covered = [[fault, f"`{node}`", outcome] for fault, node, outcome in COVERED_ELSEWHERE]
    return "\n".join([
        INTRO,
        *([render_corpus(corpus), ""] if corpus else []),
        render_damage(), "",
        "## Other conditions\n",
        _table(["condition", "how it is handled", "tested by"], [list(r) for r in CONDITIONS]), "",
        "## Hostile inputs (`workbench analyze --json DIR`)\n",
        "Exit 2 is a one-line error (the message is the first stderr line; DIR is the input's path).\n",
        _table(["case", "input", "how", "exit", "message", "kept"], rows),
        "\n## Faults injected by other tests\n",
        _table(["fault", "test", "outcome the test asserts"], covered),
        "\n## Found by the fuzzing (or probing the fields analysis reads), fixed (each test is the regression test)\n",
        _table(["test", "failure"], [[f"`{n}`", why] for n, why in known]),
        *(["\n## Known, not fixed yet (each test is a strict xfail: it fails once the bug is fixed)\n",
           _table(["test", "failure"], [[f"`{n}`", why] for n, why in open_bugs])] if open_bugs else []),
        "\n## Not tested\n",
        _table(["fault", "why"], [list(r) for r in not_tested]),
        "",
    ])
