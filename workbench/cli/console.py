"""Text output of the commands: the result on stdout, progress and notes on stderr.

``workbench analyze RUN > out.txt`` (or ``| less``) captures the verdict; the progress bar, the
cache's notes and ``workbench profile``'s "run written to …" stay on the terminal. ``profile``
and ``train --profile`` end the same way (:func:`finish_profiled_run`): the training script's
own output has passed through untouched, then the verdict of the run follows on stdout.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from workbench.format.errors import WorkbenchError
from workbench.format.markup import line, plain
from workbench.format.words import count, pct, plural
from workbench.present.shown import alternative_line  # noqa: F401 - the CLI's and the app's words for an alternative

COLOURS = {"critical": "red", "warning": "yellow", "info": "cyan"}


def make(file=None, **kw):
    """A rich console as every command prints with: no highlighting of numbers and no ``:emoji:``
    codes (a kernel or run called ``:smile:`` prints as written); ``kw``: rich.console.Console's."""
    from rich.console import Console

    return Console(file=file, highlight=False, emoji=False, **kw)


PIPED_WIDTH = 10_000
"""A file or a pipe has no width: lines are written whole (no wrapping), tables at their own width."""


def columns() -> int | None:
    """``$COLUMNS`` where it is a width (20 to 10,000 columns), else None."""
    v = os.environ.get("COLUMNS", "").strip()
    return int(v) if v.isdigit() and 20 <= int(v) <= PIPED_WIDTH else None


def out():
    """A rich console on stdout: the result. In a terminal it fits the terminal's width; into a
    file or a pipe (``> verdict.txt``, ``| less``) each line is written whole, unwrapped, unless
    ``$COLUMNS`` says how wide the reader is (``COLUMNS=80 workbench analyze RUN | less``): then the
    lines are wrapped between words to it and the tables fitted, as in a terminal of that width."""
    con = make(sys.stdout)
    if not con.is_terminal:
        width = columns()
        con = make(sys.stdout, width=width) if width else make(sys.stdout, width=PIPED_WIDTH, soft_wrap=True)
    return con


def err():
    """A rich console on stderr: progress and notes. As :func:`out`: in a terminal it fits the
    terminal's width; into a file or a pipe (``2> notes.txt``) each line is written whole, unless
    ``$COLUMNS`` says how wide the reader is (rich's default of 80 would break a one-line warning
    into several)."""
    con = make(stderr=True)
    if not con.is_terminal:
        width = columns()
        con = make(stderr=True, width=width) if width else make(stderr=True, width=PIPED_WIDTH, soft_wrap=True)
    return con


def note(text) -> None:
    """One line for the person at the terminal, on stderr: markup we wrote, or a
    :func:`workbench.format.markup.line` (what comes from a run or a user, printed as written)."""
    err().print(text)


def error(text: str) -> None:
    """The one line of an error: what a run or a user wrote in it (a path, a name) is escaped, newlines too."""
    from workbench.format.printable import printable

    print(f"workbench: error: {printable(text, one_line=True)}", file=sys.stderr)


def analysed(path: Path | str, *, workers: int | None = None, cache: bool = True, executor: str | None = None,
             bar: bool = False, peak: str | None = None):
    """The run as every command shows it (workbench.present.shown: workbench.pipeline.analyze with the
    planner's answers to its findings): the cached result when nothing it was made from changed (read without
    importing pandas), else analysed (a progress bar on stderr with ``bar``) and cached. ``peak``:
    a user's peak (workbench.hardware.devices.peak_spec): it changes the figures, so the result
    cache is neither read nor written."""
    from workbench.pipeline import Options
    from workbench.present.shown import ahead, shown

    options = Options(workers=workers, cache=cache, executor=executor, peak=peak)
    ahead(path, options)  # a run of one big trace: decoded in forked processes while the analysis imports
    if not bar:
        return shown(path, options)
    from rich.progress import Progress

    # redrawn as each trace is reduced, by this thread: a refresh thread would keep the reduction's
    # worker processes from being forks of this one (workbench.pipeline.reduce)
    with Progress(console=err(), transient=True, auto_refresh=False) as p:
        task = p.add_task("reducing traces", total=None)
        p.refresh()
        return shown(path, options, lambda done, total, f: p.update(task, total=total, completed=done,
                                                                    description=_progress_name(f), refresh=True))


def _progress_name(f) -> str:
    """The progress bar's label (rich reads it as markup, and it lasts a moment: brackets become parentheses)."""
    return "reduced " + Path(f).name.replace("[", "(").replace("]", ")").replace("\\", "/")


def analysis_doc(path: Path | str, **kw) -> dict:
    """The ``workbench analyze --json`` document of a run (:func:`analysed`'s result)."""
    return analysed(path, **kw).result.to_json()


def print_analysis(result, con=None) -> None:
    """The verdict, from the run's result (workbench.pipeline.result.Result, or its ``--json``
    document), on stdout (or ``con``)."""
    from workbench.pipeline.result import Result

    r = result if isinstance(result, Result) else Result.from_json(result)
    con = con or out()
    run, summary = r.run, r.summary
    categories = list(summary.breakdown_pct)
    con.print(line("[bold]{}[/]: {} rank(s), {}, {} profiled step(s)", run.name, run.world_size,
                   run.device or "unknown device", summary.steps))
    for w in run.warnings:
        con.print(line("[yellow]warning:[/] {}", w))
    covered = summary.steps_covered
    title = "mean per step (ms)" + (f" — {covered}" if covered and covered.startswith("the job") else ", profiled steps")
    if summary.per_rank:  # a run that failed before its trace has no recorded step to break down
        con.print(rank_table(summary.per_rank, categories, title, con.width))
    if summary.note:  # the recorded steps were not the job's
        con.print(line("[cyan]note:[/] {}", summary.note))
    from workbench.format.overhead import describe

    if said := describe(summary.capture_overhead):
        con.print(line("[dim]{}[/]", said))
    ahead = summary.host_ahead
    if ahead:
        con.print(f"[cyan]note:[/] host_ahead: the GPU took {ahead['device_step_ms']:.1f} ms per step, the host "
                  f"{ahead['host_step_ms']:.1f} ms ({ahead['ratio']}×): the host ran ahead (CUDA graphs, no sync in "
                  f"the loop); step times above are the GPU's")
    for d in r.diagnoses:
        colour = COLOURS.get(d.severity, "default")
        con.print(line(f"[{colour}]{{}}[/] [bold]{{}}[/]: {{}}", f"{d.severity.upper():8}", d.id, d.title))
        con.print(line("         fix: {}", d.recommendation))
        gain = d.estimated_gain
        if gain.get("speedup_max"):
            con.print(line("         estimated gain: up to {}× ({})", gain["speedup_max"], gain.get("formula", "")))
        elif gain.get("protects"):
            con.print(line("         protects: {}", gain["protects"]))
        for alt in (d.alternatives or ())[:ALTERNATIVES_SHOWN]:
            who = "measured" if str(alt.get("source", "")).startswith("fake") else "planner"
            con.print(line(f"         {who}: {{}}", alternative_line(alt)))
        if d.alternatives == ():
            con.print("         planner: no layout it tried on these GPUs serves this better (nothing fits, "
                      "or nothing beats the run by 3 %)")
    _print_memory(r.memory, con, gpu=run.has_gpu)
    _print_model(r.model, r.metrics, con)
    _print_efficiency(r.efficiency, con, withheld={i["figure"] for i in r.implausible})
    con.print(line("[bold]verdict:[/] {}", r.verdict))


def rank_table(per_rank, categories: list[str], title: str, width: int):
    """The per-rank table of the step's categories, ``ms (share)`` a cell; where that is wider
    than ``width`` (an 80-column terminal), each cell on two lines and lighter rules, so that
    every header stays whole ("communication", not "commun…")."""
    from rich import box
    from rich.table import Table

    def build(compact: bool) -> Table:
        t = Table(title=plain(title), title_justify="left",
                  **({"box": box.SIMPLE_HEAD, "pad_edge": False} if compact else {}))
        t.add_column("rank", justify="right")
        t.add_column("step", justify="right")
        for c in categories:
            t.add_column(plain(c), justify="right")
        sep = "\n" if compact else " "
        for row in per_rank:
            t.add_row(str(int(row["rank"])), f"{row['step_ms']:.1f}",
                      *[f"{row[f'{c}_ms']:.1f}{sep}({row[f'{c}_pct']:.0f}%)" for c in categories])
        return t

    import io

    wide = build(False)
    if make(io.StringIO(), width=PIPED_WIDTH).measure(wide).maximum <= width:
        return wide
    return build(True)


def _print_model(model, metrics, con) -> None:
    """One line: the model the trace shows (analysis.model), and the job's tokens/s."""
    if not model.kind:
        return
    f = {k: v["value"] for k, v in model.fields.items() if v.get("value") is not None}
    parts = [model.kind]
    if f.get("params_total"):
        parts.append(f"{count(f['params_total'])} parameters")
    if f.get("params_active") and f.get("params_active") != f.get("params_total"):
        parts.append(f"{count(f['params_active'])} active per token")
    shape = [f"{k} {f[k]}" for k in ("layers", "hidden", "heads", "kv_heads", "head_dim", "v_head_dim", "ffn", "vocab", "seq")
             if k in f and not (k == "head_dim" and f.get("heads", 0) * f[k] == f.get("hidden"))]
    if shape:
        parts.append(" ".join(shape) + (f" ({f['attention']})" if f.get("attention") else "")
                     + (" tied" if f.get("tied") else ""))
    if f.get("experts"):
        parts.append(f"{f['experts']} experts top-{f.get('top_k', '?')}"
                     + (f" + {f['shared_experts']} shared" if f.get("shared_experts") else "")
                     + (f", expert ffn {f['moe_ffn']}" if f.get("moe_ffn") else "")
                     + (f", {f['moe_layers']} MoE + {f.get('dense_layers', 0)} dense layers" if f.get("moe_layers") else ""))
    if "global_tokens_per_step" in f:
        parts.append(f"{f['global_tokens_per_step']:,} tokens/step ({plural(f.get('micro_batches', 1), 'micro-batch')} of "
                     f"{f.get('micro_batch', '?')})")
    for k in ("dtype", "optimizer"):
        if k in f:
            parts.append(str(f[k]))
    if "recompute" in f:
        parts.append(f"recompute {f['recompute']}")
    lay = f.get("layout")
    if lay:
        parts.append(f"dp {lay['dp']} tp {lay['tp']} pp {lay['pp']}" + (f" ep {lay['ep']}" if lay.get("ep", 1) > 1 else "")
                     + (f" ZeRO-{lay['zero']}" if lay.get("zero") else "")
                     + (" FSDP" if lay.get("fsdp") else "")
                     + (" optimizer offloaded" if lay.get("optimizer_offload") else "")
                     + (" parameters offloaded" if lay.get("param_offload") else ""))
    trainer = getattr(model, "extra", {}).get("trainer") if model is not None else None
    if trainer:
        parts.append(f"trainer {trainer['title']}")
    con.print(line("[bold]model:[/] {}", ", ".join(map(str, parts))))
    if metrics.tokens_per_s:
        con.print(f"  tokens/s: {metrics.tokens_per_s:,.0f}")


ALTERNATIVES_SHOWN = 2


def _size(b: float) -> str:
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 / 10 else f"{b / 2**20:.1f} MiB" if b >= 2**20 / 10 else f"{b / 2**10:.1f} KiB"


def memory_line(memory: dict | None, gpu: bool | None = None) -> str | None:
    """One line: the run's memory by category (analysis.memory_categories) and what it splits; ``gpu``: the
    run had a GPU (its categories not measured were not recorded, not "not measured on CPU")."""
    if not memory or not memory.get("by_category"):
        return None
    cats = memory["by_category"]
    parts = [f"{k} {_size(v['bytes'])}" for k, v in cats.items() if v.get("bytes") is not None]
    missing = [k for k, v in cats.items() if v.get("bytes") is None]
    peak = memory.get("peak_reserved_gib")
    at = "at the out-of-memory error" if memory.get("at") == "out of memory" else "at the peak"
    measured = "measured" if str(cats.get("weights", {}).get("source", "")).startswith("measured") else "inferred"
    where = f"rank {memory.get('rank')}, {at}" + (f", {peak:.2f} GiB reserved" if peak is not None else "")
    why = "not measured on CPU" if not gpu else "not recorded (no allocator peak in the run)"
    tail = f"model states {measured}" + (f"; {why}: {', '.join(missing)}" if missing else "")
    return f"{' · '.join(parts)} ({where}; {tail})"


def _print_memory(memory, con, gpu: bool | None = None) -> None:
    if said := memory_line(memory, gpu):
        con.print(line("[bold]memory:[/] {}", said))
        if memory.get("note"):
            con.print(line("[cyan]note:[/] {}", memory["note"]))


def _print_efficiency(eff, con, top: int = 6, withheld: set[str] = frozenset()) -> None:
    """MFU and the kernel-class breakdown (analysis.flops / analysis.kernel_classes); ``withheld``:
    the figures past their physical bounds (``Result.implausible``), named as withheld."""
    if not eff:
        return
    mix = ", ".join(f"{d} {p:.0f}%" for d, p in sorted(eff.dtype_flops_pct.items(), key=lambda kv: -kv[1]))
    if eff.mfu_pct is not None:
        mfu = f"MFU {pct(eff.mfu_pct)}"
    elif "efficiency.mfu_pct" in withheld:
        mfu = "MFU withheld (past the device's peak: see the warning)"
    else:
        mfu = "MFU n/a (no peak for this device and dtype: --peak-tflops X --peak-dtype D)"
    if eff.mfu_bf16_pct is not None and eff.mfu_bf16_pct != eff.mfu_pct:
        mfu += f" ({pct(eff.mfu_bf16_pct)} of the bf16 peak)"
    if eff.hfu_pct is not None and eff.mfu_source == "model":
        mfu += f", HFU {pct(eff.hfu_pct)}"
    elif "efficiency.hfu_pct" in withheld and eff.mfu_source == "model":
        mfu += ", HFU withheld"
    flops = eff.flops_per_step
    rate = eff.achieved_tflops * 1e12 if eff.achieved_tflops is not None else None
    unit, scale = ("TFLOP", 1e12) if max(flops, rate or 0) >= 1e12 else ("GFLOP", 1e9)  # CPU runs: GFLOP
    if rate is None:
        rated = f"{flops / scale:.3g} {unit} per step (implausible: see the warning)"
    else:
        rated = f"{flops / scale:.2f} {unit} per step, {rate / scale:.1f} {unit}/s"
    con.print(line("[bold]efficiency:[/] {}; FLOPs by dtype: {}", f"{rated}, {mfu}", mix))
    if eff.mfu_source == "model":
        con.print(line("  MFU counts {}; HFU the FLOPs the trace executed", eff.mfu_convention))
    if eff.mfu_by_convention:
        con.print(line("  by convention: {}", ", ".join(
            f"{name} {c['model_flops_per_token'] / 1e6:,.1f}M FLOPs/token" + (f" MFU {c['mfu_pct']:.1f}%" if c.get("mfu_pct") is not None else "")
            for name, c in eff.mfu_by_convention.items())))
    if eff.moe:
        m = eff.moe
        con.print(f"  mixture of experts ({m['source']}): expert GEMMs {m['expert_gemm_pct']:.1f}% of the step, routing "
                  f"{m['routing_pct']:.1f}%, token dispatch/combine {m['dispatch_pct']:.1f}%")
    if eff.mfu_note:
        con.print(line("[cyan]note:[/] {}", eff.mfu_note))
    if eff.classes:
        parts = []
        for c in eff.classes[:top]:
            peak = f", {c['pct_of_peak']:.0f}% of peak" if c["pct_of_peak"] is not None else ""
            parts.append(f"{c['class']}/{c['subclass']} {c['time_pct']:.0f}%{peak}")
        con.print(line("  kernel time: {}", " · ".join(parts)))
    if eff.other_kernels:
        names = ", ".join(str(k["name"])[:60] for k in eff.other_kernels[:3])
        con.print(line("  unclassified kernels ({}): {}", len(eff.other_kernels), names))


def reporting_rank() -> bool:
    """False on the ranks of a torchrun/srun job other than rank 0: rank 0 reports for the job."""
    from workbench.capture.launcher import already_a_rank

    return not already_a_rank() or os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) == "0"


INTERRUPTED = False
"""A Ctrl-C was caught in this process (workbench.cli.main.run exits so that it stays caught)."""


def interrupted() -> None:
    """Note that this process caught a KeyboardInterrupt and carried on."""
    global INTERRUPTED
    INTERRUPTED = True


def next_commands(commands: list[str]) -> None:
    """What to run next, on stderr: ``next:`` then each command on lines of its own, whole, to be copied
    (broken between arguments with ``\\`` only where it is wider than the terminal or ``$COLUMNS``)."""
    from rich.text import Text

    from workbench.format.printable import printable
    from workbench.format.terminal import command_lines

    con = err()
    width = con.width if con.is_terminal else (columns() or PIPED_WIDTH)
    con.print(line("[bold]next:[/]"))
    for c in commands:
        for ln in command_lines(printable(c, one_line=True), width, "  "):
            con.print(Text(ln), no_wrap=True, crop=False, soft_wrap=True)


def finish_profiled_run(code: int, run_dir: Path, analyze: bool = True) -> int:
    """The end of ``workbench profile`` and ``workbench train --profile``: where the run went
    (stderr), its verdict (stdout), what to run next (stderr); returns the script's exit code.

    The run is complete on disk: a Ctrl-C now only skips the verdict, and the exit code stays the
    script's (or 128 + the signal that ended it)."""
    if not reporting_rank():
        return code
    note(line("[bold]workbench[/]: run written to {} (exit code {})", run_dir, code))
    if not analyze:
        return code
    try:
        print_analysis(analysed(run_dir).result)
    except WorkbenchError as e:
        note(line("[yellow]workbench: nothing to analyze: {}[/]", e))
        return code
    except KeyboardInterrupt:
        interrupted()
        error(f"analysis interrupted; the run is kept: workbench analyze {run_dir}")
        return code
    except ImportError as e:  # a capture-only machine (e.g. a GPU image without msgspec or pandas)
        error(f"no verdict here: analysis needs {e.name or e} (pip install workbench); the run is kept: "
              f"workbench analyze {run_dir}")
        return code
    next_commands([f"workbench analyze {shlex.quote(str(run_dir))}",
                   f"streamlit run app.py -- --traces {shlex.quote(str(run_dir.parent))}"])
    return code

