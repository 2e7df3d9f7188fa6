"""The ``workbench`` command. Parses arguments and prints; the work is done in the library.

Errors users can fix are one line on stderr and exit code 2. ``workbench profile`` returns the
training script's own exit code. Workbench's own messages go to stderr, so the script's stdout
passes through untouched.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from workbench.errors import WorkbenchError

EXAMPLES = {
    "profile": """examples:
  workbench profile train.py --lr 3e-4
  workbench profile --stop-after-profile main.py -a resnet50      # end a long script after the window
  workbench profile --steps-from backward word_language_model/main.py   # a loop without torch.optim
  workbench profile --nproc-per-node 2 workbench/examples/slow_data_ddp.py --num-workers 0
  torchrun --nproc-per-node 8 -m workbench profile train.py     # already under torchrun/srun
""",
    "analyze": """examples:
  workbench analyze traces/slow_data_ddp-20261202-103000
  workbench analyze ./log/resnet --json          # a tensorboard_trace_handler directory
  workbench analyze runs/llm-256 --workers 16    # reduce 16 ranks' traces at a time
  workbench analyze runs/llm-256 --executor dask://scheduler:8786   # on a Dask cluster

Each rank's trace is reduced to the frames the rules read in a worker process; the results are
cached in RUN/.workbench-cache (or ~/.cache/workbench when RUN is read-only), so opening the run
again reads the cache (any change of a trace file recomputes; --no-cache bypasses it).
""",
}


def _err(msg: str) -> None:
    print(f"workbench: error: {msg}", file=sys.stderr)


def _console():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def cmd_profile(args: argparse.Namespace) -> int:
    from workbench.capture.launcher import already_a_rank, parse_schedule, profile

    schedule = parse_schedule(args.schedule)
    code, run_dir = profile(args.script, args.args, nproc=args.nproc_per_node, out=args.out, schedule=schedule,
                            steps_from=args.steps_from, max_steps=args.max_steps,
                            stop_after_profile=args.stop_after_profile)
    if already_a_rank() and os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) != "0":
        return code  # under torchrun/srun: rank 0 reports for the job
    con = _console()
    con.print(f"[bold]workbench[/]: run written to {run_dir} (exit code {code})")
    if args.no_analyze:
        return code
    # The run is complete on disk: a Ctrl-C now only skips the verdict, and the exit code stays
    # the script's (or 128 + the signal that ended it).
    try:
        from workbench.verdict import analyze_run

        analysis = analyze_run(run_dir)
        _print_analysis(analysis, con)
    except WorkbenchError as e:
        con.print(f"[yellow]workbench: nothing to analyze: {e}[/]")
        return code
    except KeyboardInterrupt:
        _err(f"analysis interrupted; the run is kept: workbench analyze {run_dir}")
        return code
    con.print(f"next: [bold]workbench analyze {run_dir}[/] · [bold]streamlit run app.py -- --traces {run_dir.parent}[/]")
    return code


def _print_analysis(analysis, con) -> None:
    """Print an Analysis (see :func:`_print_doc`)."""
    _print_doc(analysis.to_json(), con)


def _print_doc(doc: dict, con) -> None:
    """Print the verdict from its ``--json`` document (fresh, or the cached one)."""
    from rich.table import Table

    run, summary = doc["run"], doc["summary"]
    categories = list(summary["breakdown_pct"]) or ["compute", "communication", "memcpy", "dataloader", "host", "idle"]
    con.print(f"[bold]{run['name']}[/]: {run['world_size']} rank(s), {run['device'] or 'unknown device'}, "
              f"{summary['steps']} profiled step(s)")
    for w in run["warnings"]:
        con.print(f"[yellow]warning:[/] {w}")
    t = Table(title="mean per step (ms)", title_justify="left")
    t.add_column("rank", justify="right")
    t.add_column("step", justify="right")
    for c in categories:
        t.add_column(c, justify="right")
    for row in summary["per_rank"]:
        t.add_row(str(int(row["rank"])), f"{row['step_ms']:.1f}",
                  *[f"{row[f'{c}_ms']:.1f} ({row[f'{c}_pct']:.0f}%)" for c in categories])
    con.print(t)
    ahead = summary.get("host_ahead")
    if ahead:
        con.print(f"[cyan]note:[/] host_ahead: the GPU took {ahead['device_step_ms']:.1f} ms per step, the host "
                  f"{ahead['host_step_ms']:.1f} ms ({ahead['ratio']}×): the host ran ahead (CUDA graphs, no sync in "
                  f"the loop); step times above are the GPU's")
    colours = {"critical": "red", "warning": "yellow", "info": "cyan"}
    for d in doc["diagnoses"]:
        col = colours[d["severity"]]
        con.print(f"[{col}]{d['severity'].upper():8}[/] [bold]{d['id']}[/]: {d['title']}")
        con.print(f"         fix: {d['recommendation']}")
        gain = d["estimated_gain"]
        if gain.get("speedup_max"):
            con.print(f"         estimated gain: up to {gain['speedup_max']}× ({gain.get('formula', '')})")
    _print_efficiency(doc.get("efficiency"), con)
    con.print(f"[bold]verdict:[/] {doc['verdict']}")


def _print_efficiency(eff: dict | None, con, top: int = 6) -> None:
    """MFU and the kernel-class breakdown (analysis.flops / analysis.kernel_classes)."""
    if not eff:
        return
    mix = ", ".join(f"{d} {p:.0f}%" for d, p in sorted(eff["dtype_flops_pct"].items(), key=lambda kv: -kv[1]))
    mfu = f"MFU {eff['mfu_pct']:.1f}%" if eff["mfu_pct"] is not None else "MFU n/a (no peak for this device)"
    if eff["mfu_bf16_pct"] is not None and eff["mfu_bf16_pct"] != eff["mfu_pct"]:
        mfu += f" ({eff['mfu_bf16_pct']:.1f}% of the bf16 peak)"
    flops, rate = eff["flops_per_step"], eff["achieved_tflops"] * 1e12
    unit, scale = ("TFLOP", 1e12) if max(flops, rate) >= 1e12 else ("GFLOP", 1e9)  # CPU runs: GFLOP
    con.print(f"[bold]efficiency:[/] {flops / scale:.2f} {unit} per step, {rate / scale:.1f} {unit}/s, {mfu}; "
              f"FLOPs by dtype: {mix}")
    if eff["classes"]:
        parts = []
        for c in eff["classes"][:top]:
            peak = f", {c['pct_of_peak']:.0f}% of peak" if c["pct_of_peak"] is not None else ""
            parts.append(f"{c['class']}/{c['subclass']} {c['time_pct']:.0f}%{peak}")
        con.print(f"  kernel time: {' · '.join(parts)}")
    if eff["other_kernels"]:
        names = ", ".join(k["name"][:60] for k in eff["other_kernels"][:3])
        con.print(f"  unclassified kernels ({len(eff['other_kernels'])}): {names}")


def _positive(v: str) -> int:
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v!r}")
    return n


def cmd_analyze(args: argparse.Namespace) -> int:
    from workbench import cache

    # a run opened before (same traces, CSVs, manifest and workbench) prints from the cache
    doc = None if args.no_cache else cache.cached_result(args.path)
    if doc is None:
        doc = _analyze_doc(args)
        if not args.no_cache:
            cache.write_result(args.path, doc)
    if args.json:
        json.dump(doc, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return 0
    _print_doc(doc, _console())
    return 0


def _analyze_doc(args: argparse.Namespace) -> dict:
    from rich.progress import Progress

    from workbench.verdict import analyze_run

    def run(progress=None) -> dict:
        a = analyze_run(args.path, progress=progress, workers=args.workers, cache=not args.no_cache, executor=args.executor)
        return json.loads(json.dumps(a.to_json(), default=str))  # as printed, and as cached

    if args.json:
        return run()
    with Progress(console=_console(), transient=True) as bar:
        task = bar.add_task("reducing traces", total=None)

        def progress(done, total, f):
            bar.update(task, total=total, completed=done, description=f"reduced {Path(f).name}")

        return run(progress)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="workbench",
        description="Profile distributed PyTorch training, find why the GPUs are not busy, verify the fix.",
        epilog="run 'workbench COMMAND --help' for a command's options and examples",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fmt = argparse.RawDescriptionHelpFormatter

    pr = sub.add_parser("profile", help="run a training script under the profiler (1..N ranks)",
                        description="Run an unmodified training script with torch.profiler, an NVML sampler "
                                    "and per-step metrics; write a run directory; print the verdict.",
                        epilog=EXAMPLES["profile"], formatter_class=fmt)
    pr.add_argument("--nproc-per-node", type=int, default=1, metavar="N", help="ranks to start through torchrun (default 1)")
    pr.add_argument("--out", type=Path, default=None, metavar="DIR", help="run directory (default traces/<script>-<time>)")
    pr.add_argument("--schedule", default="1,1,3", metavar="WAIT,WARMUP,ACTIVE",
                    help="profiler schedule in optimizer steps (default 1,1,3)")
    pr.add_argument("--steps-from", default="auto", metavar="SOURCE",
                    help="what marks a training step: auto (default: optimizer.step(), else backward(), else "
                         "time windows), optimizer, backward, annotation:NAME (a record_function range), time:SEC")
    pr.add_argument("--max-steps", type=int, default=None, metavar="N",
                    help="end the script cleanly after N steps (default: run to completion)")
    pr.add_argument("--stop-after-profile", action="store_true",
                    help="end the script cleanly once the last profiled step is written")
    pr.add_argument("--no-analyze", action="store_true", help="do not print the verdict after the run")
    pr.add_argument("script", help="the training script")
    pr.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    pr.set_defaults(func=cmd_profile)

    an = sub.add_parser("analyze", help="verdict, evidence and fix for a run",
                        description="Analyze a run directory, or a directory of *.pt.trace.json[.gz] files written "
                                    "by torch.profiler.tensorboard_trace_handler (one per rank).",
                        epilog=EXAMPLES["analyze"], formatter_class=fmt)
    an.add_argument("path", type=Path, help="run directory, trace directory or one trace file")
    an.add_argument("--json", action="store_true", help="print one JSON object (schema workbench.analyze/1)")
    an.add_argument("--workers", type=_positive, default=None, metavar="N",
                    help="worker processes that reduce the ranks' traces (default: this machine's cores)")
    an.add_argument("--no-cache", action="store_true", help="neither read nor write the run's analysis cache")
    an.add_argument("--executor", default=None, metavar="URL",
                    help="local (default) or dask://HOST:PORT: reduce the traces on that Dask cluster (its workers "
                         "must see the run at the same path; pip install 'workbench[cluster]')")
    an.set_defaults(func=cmd_analyze)

    # Commands owned by other modules register themselves here (each imports torch lazily).
    from workbench.compare import add_compare_parser
    from workbench.engine.cli import add_train_parser
    from workbench.plan.cli import add_plan_parser
    from workbench.report import add_report_parser

    add_train_parser(sub)
    add_compare_parser(sub)
    add_report_parser(sub)
    add_plan_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except WorkbenchError as e:
        _err(str(e))
        return 2
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except BrokenPipeError:  # `workbench analyze --json | head`: the reader left; not an error
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
