"""``workbench compare A B`` (and ``workbench compare RUN PLAN.json``): parses, calls
workbench.pipeline.compare (or workbench.calibration.compare_plan) and prints; results on stdout."""

from __future__ import annotations

import argparse
import sys

from workbench.format.jsonout import dumps  # strict JSON: no NaN/Infinity
from workbench.cli.registry import command
from workbench.pipeline.compare import Comparison, compare_runs


EXAMPLES = """examples:
  workbench compare traces/ddp_slow_data traces/ddp_fixed_data
  workbench compare A B --json
  workbench compare RUN PLAN.json     # a run against its `workbench plan --json` (predicted vs measured)"""


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="run A (before): run directory, trace directory or trace file")
    p.add_argument("b", help="run B (after)")
    p.add_argument("--json", action="store_true", help="print one JSON object (schema workbench.compare/1)")
    p.add_argument("--force", action="store_true",
                   help="RUN PLAN.json: compare even when the plan is for another model, GPU, GPU count or device class")


@command("compare", help="per-metric deltas between two runs: did the fix work?",
         description="Analyze runs A (before) and B (after) and print per-metric deltas, the "
                     "diagnoses B resolved or introduced, and the measured speed-up next to A's estimate.",
         examples=EXAMPLES, arguments=_arguments)
def cmd_compare(args: argparse.Namespace) -> int:
    from workbench.calibration.compare_plan import cmd_compare_plan, is_plan_file

    if is_plan_file(args.b):  # `workbench compare RUN PLAN.json`: the run against its plan
        return cmd_compare_plan(args)
    from workbench.cli.console import analysed

    cmp = compare_runs(analysed(args.a).result, analysed(args.b).result)
    if args.json:
        sys.stdout.write(dumps(cmp.to_json(), indent=2, default=str))
        sys.stdout.write("\n")
        return 0
    _print(cmp)
    return 0


def _print(cmp: Comparison) -> None:
    """The comparison on stdout (workbench.cli.console)."""
    from rich.table import Table

    from workbench.cli.console import out
    from workbench.format.markup import line, plain
    from workbench.format.words import signed_pct

    con = out()
    t = Table(title=plain(f"A = {cmp.a.run.name}   B = {cmp.b.run.name}"), title_justify="left")
    for c in ("metric", "A", "B", "Δ", "Δ%"):
        t.add_column(c, justify="left" if c == "metric" else "right")

    def f(v, fmt="{:,.2f}"):
        return "–" if v is None or v != v else fmt.format(v)

    for row in cmp.metrics.to_dict("records"):
        t.add_row(plain(row["metric"]), f(row["a"]), f(row["b"]), f(row["delta"], "{:+,.2f}"),
                  "–" if row["delta_pct"] is None or row["delta_pct"] != row["delta_pct"] else signed_pct(row["delta_pct"]))
    con.print(t)
    for m in cmp.mismatches:
        con.print(line("[yellow]not like for like:[/] {}", m))
    if cmp.speedup_measured is not None:
        caveat = " — not a fix's speed-up: the runs differ in more than a change to the job (above)" if cmp.mismatches else ""
        con.print(line("[bold]measured speed-up[/] (A's job step / B's): {}×{}", f"{cmp.speedup_measured:.2f}", caveat))
    con.print("step_ms (= steady_step_ms) is each run's job step, the mean of its unprofiled steps (the steps "
              "`workbench analyze` names); the shares are the profiled steps' set against it, trace_step_ms the "
              "profiled steps' own; mfu_pct counts the model's FLOPs (torchtitan's convention per token: analyze's model.convention), hfu_pct the "
              "FLOPs the trace executed, both of the job's step")
    for i in cmp.resolved:
        est = cmp.estimates.get(i)
        within = cmp.within_estimate(i)
        note = "" if est is None else f" — A estimated up to {est}×" + ("" if within is None else (" (within)" if within else " (beyond the estimate)"))
        con.print(line("[green]resolved[/] {}{}", i, note))
    for i in cmp.new:
        con.print(line("[red]new[/] {}", i))
    for i in cmp.persisting:
        con.print(line("[yellow]still[/] {}", i))
    if not (cmp.resolved or cmp.new or cmp.persisting):
        con.print("no warning-level diagnosis in either run")
