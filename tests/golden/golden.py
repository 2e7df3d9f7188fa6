"""The golden results of every committed run: what ``workbench analyze --json`` printed for it.

``python -m tests.golden.record`` writes them (``tests/golden/analyze.json.gz``); ``test_golden.py``
holds the CLI, the text output, the HTML report and the app to them. This module is the shared
part: which runs, how the CLI is driven, what is normalised away, and the comparison.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import os
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "traces"
GOLDEN = Path(__file__).resolve().parent / "analyze.json.gz"
RUN_TOKEN = "<RUN>"
REL_TOL = 1e-6
ABS_TOL = 1e-9
REGENERATE = "PYTHONPATH=$PWD python -m tests.golden.record"


def committed_runs() -> list[tuple[str, Path]]:
    """(name, path) of every run directory under traces/ as workbench.load.find_runs lists them:
    a manifest or trace files in it; the name is the path relative to traces/."""
    from workbench.load.run import find_runs

    return sorted((r["name"], Path(r["path"])) for r in find_runs(TRACES))


def cli(*argv: str) -> tuple[int, str, str]:
    """``workbench ARGV`` through the user-facing entry point, in this process: (exit code, stdout,
    stderr). WORKBENCH_CACHE_DIR (set by the tests' conftest) keeps any cache out of traces/."""
    from workbench.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as e:  # argparse
            code = e.code if isinstance(e.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def analyze_json(path: Path, *, cache: bool = False) -> dict:
    """The golden entry of one run: ``{"ok": True, "doc": …}`` for ``workbench analyze --json``
    (normalised), or ``{"ok": False, "exit_code": …, "error": one line}`` when it refuses the run."""
    args = ["analyze", "--json", *([] if cache else ["--no-cache"]), run_arg(path)]
    code, out, err = cli(*args)
    if code != 0:
        return {"ok": False, "exit_code": code, "error": normalise(err.strip(), path)}
    return {"ok": True, "doc": normalise(json.loads(out, parse_constant=strict), path)}


def strict(token: str):
    """json.loads' parse_constant: ``NaN``, ``Infinity`` and ``-Infinity`` are not JSON (strict
    parsers refuse them), so no document workbench prints may hold them."""
    raise ValueError(f"{token} in workbench's JSON: strict parsers refuse it")


def run_arg(path: Path) -> str:
    """The run as a user types it in the checkout: relative to the repository root."""
    try:
        return Path(path).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def normalise(obj: Any, path: Path) -> Any:
    """What legitimately varies taken out: the run's path (absolute or as typed) becomes <RUN>
    wherever a string holds it. Nothing in the document was found to vary between two recordings
    (in-process and subprocess, see record.py)."""
    forms = sorted({str(Path(path).resolve()), run_arg(path), str(path)}, key=len, reverse=True)

    def fix(o):
        if isinstance(o, str):
            for f in forms:
                o = o.replace(f, RUN_TOKEN)
            return o
        if isinstance(o, dict):
            return {fix(k): fix(v) for k, v in o.items()}
        if isinstance(o, list):
            return [fix(v) for v in o]
        return o

    return fix(obj)


def load_golden() -> dict[str, dict]:
    with gzip.open(GOLDEN, "rt", encoding="utf-8") as f:
        return json.load(f)["runs"]


def write_golden(runs: dict[str, dict]) -> None:
    doc = {"about": f"workbench analyze --json of every committed run under traces/; regenerate: {REGENERATE}",
           "rel_tol": REL_TOL, "runs": runs}
    data = json.dumps(doc, indent=None, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    with gzip.GzipFile(GOLDEN, "wb", mtime=0) as f:  # mtime 0: the same results give the same bytes
        f.write(data.encode("utf-8"))


def differences(old: Any, new: Any, path: str = "$", rel_tol: float = REL_TOL) -> Iterator[tuple[str, Any, Any]]:
    """(key path, old, new) for each place where ``new`` differs from ``old``: numbers within
    ``rel_tol`` (relative) are equal; ints and floats compare as numbers; bools are not numbers."""
    if isinstance(old, dict) and isinstance(new, dict):
        for k in old:
            if k not in new:
                yield f"{path}.{k}", old[k], "<missing>"
            else:
                yield from differences(old[k], new[k], f"{path}.{k}", rel_tol)
        for k in new:
            if k not in old:
                yield f"{path}.{k}", "<missing>", new[k]
        return
    if isinstance(old, list) and isinstance(new, list):
        if _keyed(old) and _keyed(new):  # diagnoses and the like: match by id, then order
            oid, nid = [d["id"] for d in old], [d["id"] for d in new]
            for i, d in enumerate(old):
                if d["id"] not in nid:
                    yield f"{path}[id={d['id']}]", d, "<missing>"
            for d in new:
                if d["id"] not in oid:
                    yield f"{path}[id={d['id']}]", "<missing>", d
            for d in old:
                if d["id"] in nid:
                    yield from differences(d, new[nid.index(d["id"])], f"{path}[id={d['id']}]", rel_tol)
            common = [i for i in oid if i in nid]
            if common != [i for i in nid if i in oid]:
                yield f"{path}(order of ids)", common, [i for i in nid if i in oid]
            return
        if len(old) != len(new):
            yield f"{path}(length)", len(old), len(new)
        for i, (a, b) in enumerate(zip(old, new)):
            yield from differences(a, b, f"{path}[{i}]", rel_tol)
        return
    if _number(old) and _number(new):
        if isinstance(old, float) or isinstance(new, float):
            if math.isnan(old) and math.isnan(new):
                return
            if math.isclose(old, new, rel_tol=rel_tol, abs_tol=ABS_TOL):
                return
        elif old == new:
            return
        yield path, old, new
        return
    if type(old) is not type(new) or old != new:
        yield path, old, new


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _keyed(items: list) -> bool:
    ids = [d.get("id") for d in items if isinstance(d, dict)]
    return len(ids) == len(items) and all(isinstance(i, str) for i in ids) and len(set(ids)) == len(ids)


def explain(run: str, diffs: list[tuple[str, Any, Any]], limit: int = 25) -> str:
    """The failure message: which run, which key paths, old vs new, how to regenerate."""
    lines = [f"{run}: workbench analyze --json differs from the golden at {len(diffs)} place(s):"]
    for p, a, b in diffs[:limit]:
        lines.append(f"  {p}: golden {_short(a)} -> now {_short(b)}")
    if len(diffs) > limit:
        lines.append(f"  ... and {len(diffs) - limit} more")
    lines.append(f"If the change is intended (a reviewed change of results), regenerate the goldens: {REGENERATE} "
                 f"(or `{REGENERATE} {run}` for this run) and commit tests/golden/analyze.json.gz with the change.")
    return "\n".join(lines)


def _short(v: Any, n: int = 160) -> str:
    if v == "<missing>":
        return "<missing>"
    s = repr(v) if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
    return s if len(s) <= n else s[: n - 3] + "..."


@contextlib.contextmanager
def cache_dir(path: Path) -> Iterator[None]:
    """WORKBENCH_CACHE_DIR set to ``path`` for the block (the analysis cache outside traces/)."""
    old = os.environ.get("WORKBENCH_CACHE_DIR")
    os.environ["WORKBENCH_CACHE_DIR"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("WORKBENCH_CACHE_DIR", None)
        else:
            os.environ["WORKBENCH_CACHE_DIR"] = old
