"""A plan as JSON (schema ``workbench.plan/1``) and as text.

    {"json_schema": "workbench.plan/1",
     "model": {name, layers, hidden, heads, vocab, seq, ffn, kv_heads, gated, tied, params,
               model_flops_per_token},
     "cluster": {gpu, gpus, gpus_per_node, intra_node_gbps, inter_node_gbps, memory_gib,
                 usable_memory_gib, peak_tflops: {dtype: TFLOP/s}, hbm_tb_s, links},
     "global_batch": int, "tokens_per_step": int, "stack": str, "dtype": str,
     "efficiencies": {source: "defaults"|"calibrated", runs: [path], notes: [str], gemm,
                      gemm_by_size: [{flops_per_call, share_of_peak}], attention, memory_bound,
                      optimizer, host_s_per_kernel, kernels_per_layer, busbw_gb_s: {link: GB/s},
                      gemm_flops_range: [lo, hi]|null,   # FLOPs per call the calibration measured
                      warnings: [str]},                  # e.g. the plan's matmuls outside that range
     "searched": int, "fitting": int,
     "plans": [{"rank": int|null,         # null for a --layout that is not among the fitting ones
                "given": bool,            # true for the --layout one (then plans[0])
                "layout": {tp, pp, dp, zero, mb, recompute, sp, vpp, schedule}, "layout_key": str,
                "problem": str|null,      # why it cannot run at all
                "fits": bool,
                "memory": {weights_gib, gradients_gib, optimizer_gib, activations_gib, loss_gib,
                           buffers_gib, total_gib, transient_gib, capacity_gib, stage, phase, fits,
                           formulas: {component: str}},
                "time": {step_ms, compute_ms, recompute_ms, tp_comm_ms, bubble_ms, pp_comm_ms,
                         dp_comm_ms, dp_exposed_ms, optimizer_ms, host_ms, gemm_ms, attention_ms,
                         memory_bound_ms, tokens_per_s, mfu, hfu, stage,
                         gemm_outside_calibration_pct} | null,
                "collectives": [{op, group, bytes, calls, ranks, link, when, bytes_per_step}]}],
     "rejected": [{reason, count, example, detail}],
     "from_run": {path, name, device: "cuda"|"cpu", source, measured, predicted, error_pct, inferred,
                  assumed, alternatives} | null}   # the run --from-run planned (workbench.calibration.from_run)

Keys are only ever added, never renamed or removed.
"""

from __future__ import annotations

from workbench.format.words import count, signed_pct
from workbench.hardware.systems import FIT_FRACTION
from workbench.plan.search import Evaluated, Plan, collectives_of
from workbench.plan.gemms import gemm_calls

JSON_SCHEMA = "workbench.plan/1"


def _plan_json(p: Plan, ev: Evaluated, rank: int | None, given: bool) -> dict:
    mem = ev.memory.to_json()
    return {"rank": rank, "given": given, "layout": ev.layout.to_json(), "layout_key": ev.layout.key(),
            "problem": ev.problem, "fits": ev.memory.fits and ev.problem is None, "memory": mem,
            "time": ev.time.to_json() if ev.time else None,
            "collectives": [c.to_json() for c in collectives_of(p.request, ev)] if ev.problem is None else []}


def to_json(p: Plan) -> dict:
    r, m, c = p.request, p.request.model, p.request.cluster
    plans = []
    ranked = p.ranked[: r.top]
    if p.given is not None:
        pos = next((i for i, e in enumerate(p.ranked) if e.layout == p.given.layout), None)
        plans.append(_plan_json(p, p.given, None if pos is None else pos + 1, True))
    plans += [_plan_json(p, e, i + 1, False) for i, e in enumerate(ranked)]
    eff = r.efficiencies.to_json()
    eff["warnings"] = _calibration_warnings(p, [p.given] * (p.given is not None) + ranked)
    return {
        "json_schema": JSON_SCHEMA,
        "model": model_json(m),
        "cluster": {"gpu": c.gpu.name, "gpus": c.gpus, "gpus_per_node": c.gpus_per_node,
                    "intra_node_gbps": c.intra_gbps, "inter_node_gbps": c.inter_gbps,
                    "memory_gib": round(c.gpu.memory_gib, 2), "usable_memory_gib": round(FIT_FRACTION * c.gpu.memory_gib, 2),
                    "peak_tflops": c.gpu.tflops, "hbm_tb_s": c.gpu.hbm_tb_s, "peaks_source": c.gpu.source,
                    "links": c.links_source},
        "global_batch": r.global_batch, "tokens_per_step": r.global_batch * m.seq, "stack": r.stack, "dtype": r.dtype,
        "efficiencies": eff,
        "searched": p.searched, "fitting": p.fitting,
        "plans": plans,
        "rejected": [{"reason": x.reason, "count": x.count, "example": x.example, "detail": x.detail} for x in p.losses],
        "from_run": r.from_run,
    }


def model_json(m) -> dict:
    """The plan's ``model`` block: the shape, total and active parameters, model FLOPs per token
    (``ffn`` the dense MLP's width; the MoE keys 0 for a dense model)."""
    return {"name": m.name, "layers": m.layers, "hidden": m.hidden, "heads": m.heads, "vocab": m.vocab,
            "seq": m.seq, "ffn": m.ffn_hidden, "kv_heads": m.kv, "gated": m.gated, "tied": m.tied,
            "head_dim": m.d_head, "v_head_dim": m.d_v, "attention": "MLA" if m.latent else (
                "MHA" if m.kv == m.heads else "MQA" if m.kv == 1 else "GQA"),
            "q_lora_rank": m.q_lora_rank, "kv_lora_rank": m.kv_lora_rank,
            "experts": m.experts, "top_k": m.top_k, "shared_experts": m.shared_experts, "shared_ffn": (m.shared_ffn or m.expert_ffn) if m.shared_experts else 0,
            "moe_ffn": m.expert_ffn if m.moe else 0, "moe_layers": m.moe_layers,
            "dense_layers": m.layers - m.moe_layers if m.moe else m.layers,
            "params": m.params(), "params_active": m.params_active(),
            "model_flops_per_token": m.model_flops_per_token()}


def _calibration_warnings(p: Plan, shown: list[Evaluated]) -> list[str]:
    """One line when the shown layouts' matmuls lie outside the sizes the calibration measured."""
    eff = p.request.efficiencies
    outside = [e for e in shown if e.time is not None and (e.time.gemm_outside_calibration_pct or 0) > 0]
    if not outside or not eff.gemm_flops_range:
        return []
    e = outside[0]
    sizes = [one for one, _ in gemm_calls(p.request.model, e.layout, e.stack, e.time.stage)]
    lo, hi = eff.gemm_flops_range
    more = f" (and {len(outside) - 1} more of the layouts shown)" if len(outside) > 1 else ""
    return [f"GEMM sizes outside the calibration: {e.layout.key()}'s matmuls are {min(sizes):.2g}–{max(sizes):.2g} "
            f"FLOPs per call, {e.time.gemm_outside_calibration_pct:.0f} % of their FLOPs outside the "
            f"{lo:.2g}–{hi:.2g} the runs measured (± a quarter decade){more}; larger ones are timed at the default "
            f"{eff.gemm:.0%} of peak and smaller ones at the smallest measured size's share, not extrapolated — "
            "calibrate on a run of this model's size to measure them"]


def short_key(lay: dict) -> str:
    """A layout in a few characters: ``tp8 pp16 dp64 z1 mb1 sel sp v2``."""
    mode = lay["recompute"]
    rc = {"none": "", "selective": " sel"}.get(mode, f" {mode.replace(':', '')}")  # op, layer2, hf, full
    s = f"tp{lay['tp']} pp{lay['pp']} dp{lay['dp']} z{lay['zero']} mb{lay['mb']}{rc}"
    s += " sp" if lay["sp"] else ""
    if lay["pp"] > 1:
        s += f" v{lay['vpp']}" if lay["vpp"] > 1 else (" gpipe" if lay.get("schedule") == "gpipe" else "")
    if lay.get("ep", 1) > 1:
        s += f" ep{lay['ep']}"
    return s


def print_plan(doc: dict, con, notes=None) -> None:
    """The plan document as tables on ``con`` (the result: stdout); its warnings on ``notes``
    (stderr; ``con`` when not given)."""
    from workbench.format.markup import line, plain
    from workbench.format.terminal import fitted

    m, c, e = doc["model"], doc["cluster"], doc["efficiencies"]
    moe = f", {m['experts']} experts top-{m['top_k']}, {count(m['params_active'])} active" if m.get("experts") else ""
    con.print(line("[bold]{}[/]: {}", m["name"],
                   f"{count(m['params'])} parameters (L {m['layers']}, h {m['hidden']}, "
                   f"a {m['heads']}, V {m['vocab']}, s {m['seq']}{moe}) on {c['gpus']} x {c['gpu']} "
                   f"({c['gpus_per_node']} per node, {c['memory_gib']:.1f} GiB of memory each; links {c['intra_node_gbps']:.0f} / "
                   f"{c['inter_node_gbps']:.0f} Gbit/s), global batch {doc['global_batch']} "
                   f"({doc['tokens_per_step']:,} tokens), stack {doc['stack']} {doc['dtype']}"))
    if e["source"] == "defaults":
        con.print(f"efficiencies: [yellow]datasheet peaks x stated defaults[/] (GEMM {e['gemm']:.0%}, attention "
                  f"{e['attention']:.0%}, memory-bound {e['memory_bound']:.0%} of HBM); --calibrate RUN measures yours")
    else:
        con.print(line("efficiencies: [green]calibrated[/] on {}", ", ".join(map(str, e["runs"]))))
        for n in e["notes"]:
            con.print(plain(f"  {n}"))
    for w in e.get("warnings") or []:
        (notes or con).print(line("[yellow]warning:[/] {}", w))
    fr = doc.get("from_run") or {}
    if "predicted" in fr:
        print_from_run(fr, con)
    con.print(f"searched {doc['searched']:,} layouts, {doc['fitting']:,} fit in "
              f"{c['usable_memory_gib']:.1f} GiB usable ({100 * FIT_FRACTION:.0f} % of the GPU's {c['memory_gib']:.1f} GiB)")
    moe = bool(m.get("experts"))
    columns = [(col, "left" if col == "layout" else "right")
               for col in ("#", "layout", "weights", "grads", "optim", "activ", "total", "step ms", "compute", "TP",
                           *(("EP",) if moe else ()), "bubble", "DP exp", "MFU", "tokens/s")]
    rows = []
    for p in doc["plans"]:
        mem, tm = p["memory"], p["time"]
        rank = "given" if p["given"] else str(p["rank"])
        if p["given"] and p["rank"]:
            rank = f"given ({p['rank']})"
        total = f"{mem['total_gib']:.1f}"
        cells = [rank, plain(short_key(p["layout"])), f"{mem['weights_gib']:.1f}", f"{mem['gradients_gib']:.1f}",
                 f"{mem['optimizer_gib']:.1f}", f"{mem['activations_gib'] + mem['loss_gib'] + mem['buffers_gib']:.1f}",
                 total if p["fits"] else line("[red]{}[/]", total)]
        if tm:
            cells += [f"{tm['step_ms']:,.0f}", f"{tm['compute_ms']:,.0f}", f"{tm['tp_comm_ms']:,.0f}",
                      *((f"{tm.get('ep_comm_ms', 0):,.0f}",) if moe else ()),
                      f"{tm['bubble_ms']:,.0f}", f"{tm['dp_exposed_ms']:,.0f}", f"{tm['mfu']:.1%}",
                      f"{tm['tokens_per_s']:,.0f}"]
        else:
            cells += ["–"] * (8 if moe else 7)
        rows.append(cells)
    # never a cut figure: on a narrow terminal the columns go into several tables, # and layout in each
    for t in fitted("layouts (memory per GPU in GiB; step split in ms; --layout spelling below and in --json)",
                    columns, rows, width=con.width, keep=2):
        con.print(t)
    for p in doc["plans"][:2]:
        if p["problem"]:
            con.print(line("[red]{}: cannot run: {}[/]", p["layout_key"], p["problem"]))
            continue
        mem = p["memory"]
        con.print(line("[bold]{} {}[/]: peak {} GiB at {} on stage {}" + ("" if p["fits"] else " — [red]does not fit in the {} GiB usable[/]"),
                       "given" if p["given"] else "#" + str(p["rank"]), p["layout_key"], f"{mem['total_gib']:.1f}", mem["phase"],
                       mem["stage"], *(() if p["fits"] else (f"{c['usable_memory_gib']:.1f}",))))
        for k, f in mem["formulas"].items():
            con.print(plain(f"    {k}: {f}"))
    if doc["rejected"]:
        con.print("[bold]why the others lost[/]")
        for x in doc["rejected"]:
            con.print(plain(f"  {x['count']:>6,} {x['reason']}: e.g. {x['example']} — {x['detail']}"))


def print_from_run(fr: dict, con) -> None:
    """The run beside its prediction, then the alternatives (rich console)."""
    from workbench.format.markup import line, plain

    meas, pred, err = fr.get("measured") or {}, fr.get("predicted") or {}, fr.get("error_pct") or {}

    def pair(p, m, e, unit):
        etxt = "" if e is None else f" ({signed_pct(e)})"
        return f"predicted {_num(p)} {unit}, measured {_num(m)} {unit}{etxt}"

    src = {"manifest": "its manifest's engine config", "traces": "the model inferred from its traces",
           "MODEL": "the MODEL given, the rest inferred from its traces"}.get(fr.get("source"), fr.get("source"))
    con.print(line("[bold]the run[/] {}", f"{fr['name']} ({src}): {pred.get('layout_key')}"
                                                + (f" — {fr['note']}" if fr.get("note") else "")))
    con.print(f"  step: {pair(pred.get('step_ms'), meas.get('step_ms'), err.get('step'), 'ms')}")
    con.print(f"  peak memory: {pair(pred.get('memory_gib'), meas.get('peak_memory_gib'), err.get('memory'), 'GiB')}")
    if meas.get("data_wait_ms") and meas.get("step_ms") and meas["data_wait_ms"] > 0.05 * meas["step_ms"]:
        con.print(f"  (of the measured step, {meas['data_wait_ms']:,.0f} ms per step waited on the data loader, which "
                  "the plan assumes keeps up: fix the loader first)")
    if fr.get("device") == "cpu":
        con.print("  (the run ran on CPUs: its time and memory are not a GPU's; workbench compare RUN PLAN.json holds "
                  "its allocations and communication against this plan)")
    for a in fr.get("assumed") or []:
        con.print(plain(f"  assumed: {a}"))
    if fr.get("alternatives"):
        con.print("[bold]alternatives[/] (same global batch and calibration; speed-up per GPU against the run's prediction)")
        for a in fr["alternatives"]:
            gpus = f"{a['gpus']:>6,} GPU{'s' * (a['gpus'] != 1)}"
            if not a.get("layout_key"):
                con.print(plain(f"  {gpus}: {a['note']}"))
                continue
            anchored = f", {_num(a['anchored_step_ms'])} ms anchored on the run" if a.get("anchored_step_ms") else ""
            note = f" — {a['note']}" if a.get("note") else ""
            con.print(plain(f"  {gpus}: {a['layout_key']}: {_num(a['step_ms'])} ms{anchored}, "
                            f"{_num(a['memory_gib'])} GiB, {a['speedup_per_gpu']:.2f}x per GPU{note}"))


def _num(x: float | None) -> str:
    """A figure in 3 significant digits (thousands separated): 215, 8.12, 0.0311; – for None."""
    if x is None:
        return "–"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"
