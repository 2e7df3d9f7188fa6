"""``workbench compare RUN PLAN.json``: a run against its plan, predicted next to measured.

The plan's first entry (``plans[0]``: the ``--layout`` / ``--from-run`` one when given) is held
against the run: steady step time and tokens/s, MFU, peak memory per GPU (GPU runs: the steps
CSV's ``max_mem_allocated_bytes``; gloo runs: one step's allocations above its floor against the
plan's ``transient``), communication bytes per step of rank 0 and exposed communication.

JSON (``--json``, schema ``workbench.compare_plan/1``)::

    {"json_schema": "workbench.compare_plan/1", "run": str, "plan_layout": str, "run_layout": str|null,
     "layout_matches": bool|null, "efficiencies": "defaults"|"calibrated",
     "rows": [{"metric", "unit", "predicted", "measured", "error_pct"}],
     "mismatches": [str]}   # how the plan's job differs from the run's (non-empty only with --force)
"""

from __future__ import annotations

from workbench.format.jsonout import dumps  # strict JSON: no NaN/Infinity

import json
from pathlib import Path

from workbench.format.errors import WorkbenchError

JSON_SCHEMA = "workbench.compare_plan/1"


def is_plan_file(path: str | Path) -> bool:
    """A file that says it is a ``workbench plan --json`` document (schema workbench.plan/1);
    whether it is a valid one is :func:`workbench.plan.plan_file.read_plan`'s to say."""
    from workbench.plan.plan_file import looks_like_plan

    return looks_like_plan(path)


def _row(metric: str, unit: str, predicted: float | None, measured: float | None) -> dict:
    err = None if not (predicted is not None and measured) else round(100 * (predicted / measured - 1), 2)
    return {"metric": metric, "unit": unit, "predicted": predicted, "measured": measured, "error_pct": err}


def compare_run_plan(run: str | Path, plan_doc: dict, *, force: bool = False) -> dict:
    """The run against ``plan_doc``'s first layout; WorkbenchError for a document that is not a
    valid plan, or (unless ``force``) a plan for another model, GPU, GPU count or device class."""
    from workbench.hardware.peaks import peak_flops
    from workbench.calibration.measured import max_allocated_bytes
    from workbench.plan.engine_runs import engine_case, read_manifest
    from workbench.plan.plan_file import check_plan, job_mismatches
    from workbench.pipeline import analyze

    check_plan(plan_doc)
    if not plan_doc.get("plans"):
        raise WorkbenchError("the plan has no layout to compare (its search found none that fits)")
    plan = plan_doc["plans"][0]
    if plan.get("time") is None:
        raise WorkbenchError(f"the plan's layout {plan['layout_key']} was not timed ({plan.get('problem') or 'it does not fit'})")
    res = analyze(run).result
    man = read_manifest(run)
    try:
        case = engine_case(run, man)
        run_layout = case.layout.key()
    except WorkbenchError:
        case, run_layout = None, None
    r = res.run
    mismatches = job_mismatches(plan_doc, {"name": r.name, "world_size": r.world_size, "has_gpu": r.has_gpu, "device": r.device},
                                run_shape(res, case))
    if mismatches and not force:
        raise WorkbenchError(f"the plan is not for this run: {'; '.join(mismatches)} — plan the run itself "
                             f"(workbench plan --from-run {run}) or pass --force to compare anyway")
    t, mem = plan["time"], plan["memory"]
    metrics = res.metrics
    gpu = r.has_gpu
    rows = []
    if gpu:  # a gloo (CPU) run's time says nothing about the GPUs the plan is for
        rows += [_row("steady step", "ms", t["step_ms"], metrics.steady_step_ms),
                 _row("tokens/s", "tokens/s", t["tokens_per_s"], metrics.tokens_per_s)]
    peak = peak_flops(r.device)
    fpt = (man.get("config") or {}).get("flops_per_token") or plan_doc["model"]["model_flops_per_token"]
    if gpu and peak and metrics.tokens_per_s:
        rows.append(_row("MFU", "%", 100 * t["mfu"], 100 * metrics.tokens_per_s * fpt / (r.world_size * peak)))
    if gpu:
        rows.append(_row("peak memory per GPU", "GiB", mem["total_gib"], (max_allocated_bytes(Path(run)) or 0) / 2**30 or None))
    else:
        from workbench.calibration.calibrate import step_transient_bytes

        per = step_transient_bytes(run).get(0) or []
        measured = sorted(per)[len(per) // 2] / 2**30 if per else None
        rows.append(_row("one step's allocations (rank 0)", "GiB", mem["transient_gib"], measured))
    pred_bytes = sum(c["bytes_per_step"] for c in plan.get("collectives") or [])
    meas_bytes = sum(c["bytes_per_step"] or 0 for c in res.collectives if c["rank"] == 0)
    if pred_bytes or meas_bytes:
        rows.append(_row("collective bytes per step (rank 0)", "MB", pred_bytes / 1e6, meas_bytes / 1e6 or None))
    exposed = t["tp_comm_ms"] + t["pp_comm_ms"] + t["dp_exposed_ms"]
    if gpu and metrics.exposed_comm_pct is not None and metrics.step_ms:
        rows.append(_row("exposed communication", "% of step", 100 * exposed / t["step_ms"], metrics.exposed_comm_pct))
    return {"json_schema": JSON_SCHEMA, "run": str(run), "plan_layout": plan["layout_key"], "run_layout": run_layout,
            "layout_matches": None if run_layout is None else run_layout == plan["layout_key"],
            "efficiencies": plan_doc["efficiencies"]["source"], "rows": rows, "mismatches": mismatches}


def run_shape(result, case) -> dict | None:
    """The run's model as far as known: an engine run's config (exact), else the model the
    analysis inferred (``result.model``), else None."""
    if case is not None:
        return {"layers": case.model.layers, "hidden": case.model.hidden, "params": case.model.params()}
    from workbench.calibration.from_run import inferred_fields

    f = inferred_fields(result)
    shape = {"layers": f.get("layers"), "hidden": f.get("hidden"), "params": f.get("params_total")}
    return shape if any(shape.values()) else None


def cmd_compare_plan(args) -> int:
    """The ``workbench compare RUN PLAN.json`` form (called by workbench.pipeline.compare's command)."""
    import sys

    from workbench.plan.plan_file import read_plan

    doc = compare_run_plan(args.a, read_plan(args.b), force=getattr(args, "force", False))
    if args.json:
        sys.stdout.write(dumps(doc, indent=2))
        sys.stdout.write("\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    from workbench.format.markup import line, plain

    con = Console(file=sys.stdout, highlight=False, emoji=False)  # the result; the layout note below goes to stderr
    t = Table(title=plain(f"{Path(args.a).name} against its plan ({doc['plan_layout']}, efficiencies {doc['efficiencies']})"),
              title_justify="left")
    for c in ("metric", "predicted", "measured", "error"):
        t.add_column(c, justify="left" if c == "metric" else "right")

    def f(v) -> str:
        return "–" if v is None else f"{v:,.4g}"

    for r in doc["rows"]:
        t.add_row(plain(f"{r['metric']} ({r['unit']})"), f(r["predicted"]), f(r["measured"]),
                  "–" if r["error_pct"] is None else f"{r['error_pct']:+.1f}%")
    con.print(t)
    for m in doc["mismatches"]:  # --force: compared anyway; the person should see why the errors are large
        Console(stderr=True, highlight=False, emoji=False, soft_wrap=True).print(line("[yellow]warning:[/] not the run's job: {}", m))
    if doc["layout_matches"] is False:
        Console(stderr=True, highlight=False, emoji=False, soft_wrap=True).print(
            line("[yellow]note:[/] the run's layout is {}, the plan's {}", doc["run_layout"], doc["plan_layout"]))
    return 0
