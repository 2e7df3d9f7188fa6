"""``workbench capture RUN --steps N``: open a profiler window on a job that is running under
``workbench profile``, without restarting it (workbench.capture.window_request asks; every rank opens
its profiler at the same future step, workbench.capture.windows). Imports no torch."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from workbench.cli.registry import command, positive_int

EXAMPLES = """examples:
  workbench capture traces/train-20261207-101500 --steps 3          # every rank, 3 steps, a few seconds from now
  workbench capture RUN --steps 5 --ranks 0,7                        # two ranks only
  workbench capture RUN --steps 3 --at 40000 --no-wait               # from step 40,000; do not wait for it
  kill -USR1 <pid of workbench profile>                              # the same, 3 steps, from a signal
  touch RUN/capture_now                                              # the same, from a file (its text: the steps)
"""

WAIT_S = 600.0
FIRST_STEP_S = 300.0  # how long a window asked for before the first step waits for it (CUDA and compile warm-up)


def _ranks(text: str) -> list[int]:
    try:
        ranks = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ranks as 0,1,5, got {text!r}") from None
    if not ranks or ranks[0] < 0:
        raise argparse.ArgumentTypeError(f"expected ranks as 0,1,5, got {text!r}")
    return ranks


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", type=Path, metavar="RUN", help="the run directory of a job running under workbench profile")
    p.add_argument("--steps", type=positive_int, required=True, metavar="N", help="steps to record")
    p.add_argument("--ranks", type=_ranks, default=None, metavar="R,R…", help="the ranks that record (default: all)")
    p.add_argument("--at", type=int, default=None, metavar="STEP",
                   help="the window's first step (default: a few seconds ahead of the furthest rank)")
    p.add_argument("--no-wait", action="store_true", help="ask and return at once (default: wait for the ranks' records)")
    p.add_argument("--timeout", type=float, default=WAIT_S, metavar="S",
                   help=f"seconds to wait for the window (default {WAIT_S:g})")


@command("capture", help="open a profiler window on a running job, without restarting it",
         description="Ask a job running under `workbench profile` to record N steps with torch.profiler: every rank "
                     "opens its profiler at the same future step, records, closes it and goes on. The window's traces go "
                     "to RUN/windows/<id>/; `workbench analyze RUN` lists and compares it.",
         examples=EXAMPLES, arguments=_arguments)
def cmd_capture(args: argparse.Namespace) -> int:
    from workbench.capture.window_request import last_rows, request, wait
    from workbench.format.errors import WorkbenchError
    from workbench.format.manifest import read_manifest

    run = args.path
    if not run.is_dir():
        raise WorkbenchError(f"no such run: {run}")
    status = read_manifest(run).get("status")
    if status not in (None, "running"):
        raise WorkbenchError(f"{run}: the job is not running (status {status}); a window opens only on a running job")
    if args.at is None and not last_rows(run):  # asked before the job's first step (its start can take minutes)
        print(f"workbench: waiting for {run}'s first step (up to {FIRST_STEP_S:g} s)…", file=sys.stderr, flush=True)
        deadline = time.monotonic() + FIRST_STEP_S
        while not last_rows(run) and time.monotonic() < deadline:
            time.sleep(0.5)
    try:
        req = request(run, args.steps, ranks=args.ranks, at=args.at)
    except ValueError as e:
        raise WorkbenchError(str(e)) from None
    ranks = args.ranks or sorted(last_rows(run)) or [0]
    print(f"workbench: asked for window {req['id']}: steps {req['first_step']}–{req['first_step'] + req['steps'] - 1} "
          f"on {'ranks ' + ','.join(map(str, ranks)) if args.ranks else 'every rank'}", file=sys.stderr, flush=True)
    out = run / "windows" / req["id"]
    if args.no_wait:
        print(out)
        return 0
    got = wait(run, req, ranks, args.timeout)
    for r in ranks:
        rec = got.get(r)
        if rec is None:
            print(f"workbench: rank {r}: no record of the window after {args.timeout:g} s (is the job still running?)",
                  file=sys.stderr)
            continue
        why = f" ({rec['reason']})" if rec.get("reason") else ""
        print(f"workbench: rank {r}: {rec['status']}, steps {rec['first_step']}–{rec['last_step']}{why}", file=sys.stderr)
    print(out)
    ok = all(got.get(r, {}).get("status") == "recorded" for r in ranks)
    return 0 if ok else 1
