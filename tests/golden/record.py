"""Record the goldens: ``PYTHONPATH=$PWD python -m tests.golden.record [RUN ...]``.

For every committed run under traces/ (tests.golden.golden.committed_runs), ``workbench analyze
--json --no-cache RUN`` through the CLI's entry point, normalised (the run's path), into
tests/golden/analyze.json.gz; a run the analysis refuses is recorded with its exit code and its
one-line error. Naming runs (``ddp_slow_data corpus/word_lm_cpu``) re-records only those.

``--check-stable`` records each run a second time in a fresh subprocess and prints every key that
differs between the two (what would have to be excluded as timing- or machine-dependent; with
``--workers N`` the second one reduces the ranks' traces on N processes); it writes nothing.

Regenerate only for a reviewed change of results: the test exists to catch the unreviewed ones.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

from tests.golden import golden


def record_in_subprocess(path, workers: int | None = None) -> dict:
    extra = ["--workers", str(workers)] if workers else []
    r = subprocess.run([sys.executable, "-m", "workbench", "analyze", "--json", "--no-cache", *extra, golden.run_arg(path)],
                       cwd=golden.ROOT, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        return {"ok": False, "exit_code": r.returncode, "error": golden.normalise(r.stderr.strip(), path)}
    return {"ok": True, "doc": golden.normalise(json.loads(r.stdout), path)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.golden.record", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="*", help="run names (relative to traces/); default every committed run")
    p.add_argument("--check-stable", action="store_true", help="record twice (in-process, subprocess) and diff")
    p.add_argument("--workers", type=int, default=None, help="with --check-stable: the subprocess reduces with N workers")
    args = p.parse_args(argv)

    runs = golden.committed_runs()
    if args.runs:
        known = dict(runs)
        missing = [r for r in args.runs if r not in known]
        if missing:
            p.error(f"not committed runs: {', '.join(missing)}")
        runs = [(r, known[r]) for r in args.runs]
    old = golden.load_golden() if golden.GOLDEN.exists() else {}
    if not args.runs:
        old = {}  # a full recording drops runs that are gone
    new, unstable = dict(old), 0
    with tempfile.TemporaryDirectory() as tmp, golden.cache_dir(tmp):  # --no-cache; belt and braces
        for name, path in runs:
            t = time.perf_counter()
            entry = golden.analyze_json(path)
            dt = time.perf_counter() - t
            state = "ok" if entry["ok"] else f"refused: {entry['error']}"
            print(f"{name:45s} {dt:6.1f} s  {state}", flush=True)
            if args.check_stable:
                diffs = list(golden.differences(entry, record_in_subprocess(path, args.workers), rel_tol=0.0))
                for d in diffs:
                    print(f"    unstable {d[0]}: {golden._short(d[1])} vs {golden._short(d[2])}")
                unstable += len(diffs)
            new[name] = entry
    if args.check_stable:
        print(f"{unstable} difference(s) between the two recordings")
        return 1 if unstable else 0
    golden.write_golden(new)
    print(f"wrote {golden.GOLDEN.relative_to(golden.ROOT)}: {len(new)} runs, {golden.GOLDEN.stat().st_size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
