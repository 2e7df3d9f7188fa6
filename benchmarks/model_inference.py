"""The model inferred from each committed run (workbench.analysis.model) against the true one.

Truth, where it is known: tests/scripts/llama_trainer.py's runs print their own parameters and
torchtitan's FLOPs per token (``tests/analysis/data/llama_cpu_*``: GQA, SwiGLU, an untied head,
FSDP2, recomputation none / selective / full); the engine's runs carry their config in the manifest (``traces/engine_*``,
``case_*``, ``fault_*``, ``plan_gpu_*``, ``gpu_fsdp2_370m``); nanoGPT's runs are GPT-2 124M with
the arguments traces/README.md lists (``--batch_size=12 --gradient_accumulation_steps=4``;
``bench.py``: batch 12, one micro-batch); ImageNet and timm runs are torchvision's/timm's
ResNet-50 (25,557,032 parameters) at the batch their command gives; the Hugging Face model runs
(``traces/moe_*``, ``traces/dense_*``: mixtures of experts, latent attention, a Qwen3-shaped dense
model) print their own truth (benchmarks/hf_train.py's ``truth:`` line in ``console.log``:
parameters total and active by torchtitan's rule, FLOPs per token by the convention, the shape);
the Hugging Face Trainer's corpus runs (``corpus/hf_trainer_<family>_cpu``: its own script,
unmodified, on model directories benchmarks/corpus_hf.py built) carry that directory's truth,
counted the same way from the model object that was saved, in ``truth.json``.
``params_total`` counts as right within 1 %, ``params_active`` within 10 %, ``model_flops_per_token``
within 5 % (the acceptance's tolerances); every other field exactly. Beside the fields, each run's
MFU: the workbench's (model FLOPs, the job's step) against what the trainer prints — nanoGPT's
``mfu`` (against an A100's 312 TFLOP/s, rescaled to the H200's 989), the engine's ``throughput:``
line (PaLM FLOPs per token from its manifest × tokens per step / (step × the device's peak), the
same job step).

    python -m benchmarks.model_inference          # the table BENCHMARKS.md holds
    python -m benchmarks.model_inference --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "traces"
RESNET50_PARAMS = 25_557_032


def engine_params(m: dict) -> int:
    """The engine GPT's parameters (workbench/engine/model.py): per block 12d² + 13d, the token
    table (twice when untied), the position table, the final norm."""
    d, L, V, S = m["d_model"], m["n_layer"], m["vocab"], m["seq_len"]
    return L * (12 * d * d + 13 * d) + V * d * (1 if m["tie_embeddings"] else 2) + S * d + 2 * d


def engine_truth(manifest: dict) -> dict:
    cfg = manifest["config"]
    m, p, t, d = cfg["model"], cfg["parallel"], cfg["train"], cfg["data"]
    world = int(manifest.get("world_size") or 1)
    mode = p["mode"]
    dp = world if mode in ("ddp", "zero1", "zero2", "zero3") else (p.get("dp") or 1)
    tp = world // dp if mode == "tp" else 1
    pp = world // dp if mode == "pp" else 1
    mb = p["microbatches"] if mode == "pp" else t["grad_accum"]
    gpu = str((manifest.get("ranks") or {}).get("0", {}).get("device", "")).startswith("cuda")
    dtype = "bf16" if p["mixed_precision"] == "bf16" or (p["mixed_precision"] == "auto" and gpu) else "fp32"
    truth = {
        "params_total": engine_params(m), "layers": m["n_layer"], "hidden": m["d_model"], "heads": m["n_head"],
        "kv_heads": m["n_head"], "head_dim": m["d_model"] // m["n_head"], "ffn": 4 * m["d_model"], "gated": False,
        "vocab": m["vocab"], "seq": m["seq_len"], "micro_batch": d["batch_size"] // (mb if mode == "pp" else 1),
        "micro_batches": mb, "global_tokens_per_step": d["batch_size"] * m["seq_len"] * dp * (1 if mode == "pp" else mb),
        "recompute": "full" if t["activation_checkpointing"] else (t.get("recompute") or "none"), "optimizer": t["optimizer"],
        "layout": {"world_size": world, "dp": dp, "tp": tp, "pp": pp, "fsdp": mode in ("zero2", "zero3"),
                   "zero": {"zero1": 1, "zero2": 2, "zero3": 3}.get(mode, 0), "ep": 1},
        "dtype": dtype,
    }
    if mode != "pp":
        truth["tied"] = m["tie_embeddings"]
    if m.get("moe_experts"):
        truth.update(engine_moe_truth(m))
        truth["layout"]["ep"] = p.get("ep") or 1
    elif m["tie_embeddings"] and cfg.get("flops_per_token"):
        # the engine's N drops only the position table: with a tied head that is the convention
        truth["model_flops_per_token"] = cfg["flops_per_token"]
    return {k: v for k, v in truth.items() if v is not None}


def engine_moe_truth(m: dict) -> dict:
    """The engine GPT with a mixture of experts (workbench/engine/moe.py) by hand: each MoE block
    trades the dense MLP (8d² + 5d) for a router (d·E), SwiGLU shared experts (3·d·moe_ffn each)
    and E routed SwiGLU experts (3·d·moe_ffn each); active by torchtitan's rule. FLOPs per token by
    the convention (6 · (active − the position table; the tied token table is the head) + 12·L·H·Q·T):
    the manifest's ``flops_per_token`` of the committed MoE runs predates the engine's active count."""
    d, L, h, E, k = m["d_model"], m["n_layer"], m["n_head"], m["moe_experts"], m["moe_top_k"]
    S, F, dense = m.get("moe_shared_experts") or 0, m["moe_ffn"], m.get("moe_dense_layers") or 0
    moe = L - dense
    routed = moe * E * 3 * d * F
    total = engine_params(m) - moe * (8 * d * d + 5 * d) + moe * (d * E + 3 * d * F * S) + routed
    active = total - routed + routed * k // E
    out = {"params_total": total, "params_active": active, "experts": E, "top_k": k, "shared_experts": S, "moe_ffn": F,
           "moe_layers": moe, "dense_layers": dense, "ffn": 4 * d if dense else None,
           "gated": not dense}  # no dense block: `gated` says the experts are SwiGLU
    if m["tie_embeddings"]:
        out["model_flops_per_token"] = 6 * (active - m["seq_len"] * d) + 12 * L * h * (d // h) * m["seq_len"]
    return out


NANOGPT = {"params_total": 124_373_760, "params_non_embedding": 123_587_328, "layers": 12, "hidden": 768, "heads": 12,
           "head_dim": 64, "ffn": 3072, "gated": False, "vocab": 50304, "tied": True, "seq": 1024, "micro_batch": 12,
           "recompute": "none", "optimizer": "adamw"}


def corpus_truth(name: str) -> dict | None:
    truth_json = TRACES / "corpus" / name / "truth.json"
    if truth_json.exists():  # the Trainer rows: the model directory's truth (benchmarks/corpus_hf.py)
        return json.loads(truth_json.read_text())["fields"]
    if name.startswith("nanogpt_"):
        mb = 1 if name == "nanogpt_bench_gpu" else 4
        return NANOGPT | {"micro_batches": mb, "tokens_per_step": 12 * 1024 * mb,
                          "model_flops_per_token": 6 * 123_587_328 + 12 * 12 * 12 * 64 * 1024,
                          "dtype": "tf32" if "fp32" in name else "bf16"}
    if name.startswith(("imagenet_", "timm_")):
        manifest = json.loads((TRACES / "corpus" / name / "manifest.json").read_text())
        cmd = manifest.get("command", "")
        b = re.search(r"(?:-b|--batch-size)[ =](\d+)", cmd)
        return {"kind": "convnet", "params_total": RESNET50_PARAMS, **({"micro_batch": int(b.group(1))} if b else {})}
    return None


DATA = ROOT / "tests" / "analysis" / "data"
LLAMA_LINE = re.compile(r"model: ([\d,]+) parameters \(([\d,]+) without the token embedding\), ([\d,]+) FLOPs per token, "
                        r"([\d,]+) tokens per step")


def llama_truth(run: Path) -> dict | None:
    """tests/scripts/llama_trainer.py's own print (parameters, torchtitan's FLOPs per token, tokens
    per step) and its command's arguments."""
    found = LLAMA_LINE.search((run / "console.log").read_text())
    cmd = json.loads((run / "manifest.json").read_text())["command"]
    if not found:
        return None
    arg = {k: int(v) for k, v in re.findall(r"--([a-z-]+) (\d+)", cmd)}
    params, non_emb, fpt, tokens = (int(x.replace(",", "")) for x in found.groups())
    ac = re.search(r"--ac (\w+)", cmd).group(1)
    fsdp = "--fsdp" in cmd
    return {"params_total": params, "params_non_embedding": non_emb, "model_flops_per_token": fpt,
            "global_tokens_per_step": tokens, "layers": arg["layers"], "hidden": arg["dim"], "heads": arg["heads"],
            "kv_heads": arg["kv-heads"], "head_dim": arg["dim"] // arg["heads"], "ffn": arg["ffn"], "gated": True,
            "vocab": arg["vocab"], "tied": False, "seq": arg["seq"], "micro_batch": arg["batch"],
            "micro_batches": arg.get("accum", 1), "recompute": ac, "optimizer": "adamw",
            "layout": {"world_size": 1, "dp": 1, "tp": 1, "pp": 1, "fsdp": fsdp, "zero": 3 if fsdp else 0, "ep": 1}}


TOLERANCE = {"params_total": 0.01, "params_active": 0.10, "model_flops_per_token": 0.05}
"""Relative tolerance of a field counted right; every other field must match exactly."""


def own_truth(run: Path) -> dict | None:
    """benchmarks/hf_train.py's ``truth:`` line (its own count of the model it built)."""
    log = run / "console.log"
    found = re.search(r"^truth: (\{.*\})$", log.read_text(), re.M) if log.exists() else None
    if not found:
        return None
    t = json.loads(found.group(1))
    t.pop("tokens_per_s", None)  # the script's timer: compared below, over the job's steps
    t.pop("ep", None)  # layout.ep: tests/analysis/test_moe.py holds it
    if "micro_batch" in t and "seq" in t:
        t["tokens_per_step"] = t["micro_batch"] * t["seq"]
    return t


def right(name: str, got, true) -> bool:
    tol = TOLERANCE.get(name)
    if tol is not None and isinstance(got, (int, float)) and isinstance(true, (int, float)) and true:
        return abs(got / true - 1) <= tol
    return got == true


def runs() -> list[tuple[str, dict]]:
    out = []
    for p in sorted(TRACES.iterdir()):
        mf = p / "manifest.json"
        if mf.exists() and (json.loads(mf.read_text()).get("config") or {}).get("model"):
            out.append((p.name, engine_truth(json.loads(mf.read_text()))))
    for p in sorted((TRACES / "corpus").iterdir()):
        t = corpus_truth(p.name)
        if t is not None:
            out.append((f"corpus/{p.name}", t))
    for p in sorted(TRACES.iterdir()):
        t = own_truth(p) if p.name.startswith(("moe_", "dense_")) else None
        if t is not None:
            out.append((p.name, t))
    for p in sorted(DATA.glob("llama_*")):
        t = llama_truth(p)
        if t is not None:
            out.append((str(p.relative_to(TRACES)) if p.is_relative_to(TRACES) else f"../tests/analysis/data/{p.name}", t))
    return out


def own_mfu(name: str, doc: dict) -> tuple[float | None, str]:
    """The trainer's own MFU on the H200's bf16 peak, and where it comes from."""
    from benchmarks import corpus
    from workbench.hardware.peaks import device_peak

    peak = device_peak(doc["run"]["device"])
    if name.startswith("corpus/"):
        e = corpus.BY_NAME.get(name.split("/", 1)[1])
        if e and e.timer and e.timer.mfu_regex and peak:
            own = corpus.own_times(e, (TRACES / name / "console.log").read_text())
            return own["mfu_pct"] * e.timer.mfu_peak_tflops / peak.tflops["bf16"], "its `mfu` print × 312/989"
        return None, ""
    manifest = json.loads((TRACES / name / "manifest.json").read_text())
    fpt = (manifest.get("config") or {}).get("flops_per_token")
    tps = doc["metrics"].get("tokens_per_s")
    if not (fpt and tps and peak):
        return None, ""
    # the engine's throughput line: tokens/s per device × its FLOPs per token / the bf16 peak
    return (100 * tps / doc["run"]["world_size"] * fpt / (peak.tflops["bf16"] * 1e12),
            "engine's formula: manifest FLOPs/token × recorded tokens/s")


def measure(name: str, truth: dict) -> dict:
    from workbench.format.errors import WorkbenchError
    from workbench.pipeline.verdict import analyze_run

    doc = analyze_run(TRACES / name).to_json()
    model = doc["model"]
    if model["kind"] is None and not model["fields"]:  # a run that wrote no trace (out of memory at its first step)
        raise WorkbenchError(f"{name}: no trace")
    got = {k: v["value"] for k, v in model["fields"].items()}
    rows = []
    kind_true = truth.get("kind", "transformer")
    rows.append({"field": "kind", "inferred": model["kind"], "true": kind_true, "ok": model["kind"] == kind_true})
    for k, v in truth.items():
        if k == "kind":
            continue
        rows.append({"field": k, "inferred": got.get(k), "true": v, "ok": right(k, got.get(k), v)})
    eff = doc["efficiency"] or {}
    theirs, how = own_mfu(name, doc)
    # tokens/s from the inferred model against the script's own count (steps CSV, record_metrics)
    from workbench.analysis.job import tokens_per_s
    from workbench.format.steady import steady_summary
    from workbench.pipeline.verdict import model_tokens_per_s

    a = analyze_run(TRACES / name)
    recorded = tokens_per_s(steady_summary(a.context.steps, warmup=a.context.steps_warmup))
    if recorded is None and (truth.get("tokens_per_step") or truth.get("global_tokens_per_step")):
        # a script that counts no tokens: its true tokens per step over its own timer's step
        from benchmarks import corpus
        from statistics import mean

        e = corpus.BY_NAME.get(name.split("/", 1)[-1])
        if "llama_" in name or own_truth(TRACES / name):  # "step N: …, time X ms" over the job's steps
            (job,) = doc["summary"]["job"] or [None]
            own = {int(k): float(t) for k, t in re.findall(r"^step (\d+): .*? time ([\d.]+) ms", (TRACES / name / "console.log").read_text(), re.M)}
            from workbench.format.steady import steady_steps

            steady = set(int(x) for x in steady_steps(a.context.steps[0], a.context.steps_warmup)["step"])
            steps = [t for k, t in own.items() if k in steady]
            tokens = truth.get("global_tokens_per_step") or truth.get("tokens_per_step")
            recorded = tokens / (mean(steps) / 1e3) if steps and tokens else None
        elif e and e.timer:
            own = corpus.own_times(e, (TRACES / name / "console.log").read_text())
            (job,) = doc["summary"]["job"] or [None]
            steps = [v for k, v in own.get("per_step", {}).items() if job and job["first_step"] <= k <= job["last_step"]]
            ms = mean(steps) if steps else own.get("mean_ms")
            recorded = truth["tokens_per_step"] / (ms / 1e3) if ms else None
    inferred = model_tokens_per_s(model, doc["metrics"].get("steady_step_ms") or doc["metrics"].get("step_ms"))
    fpt = got.get("model_flops_per_token")
    return {"run": name, "fields": rows, "matched": sum(r["ok"] for r in rows), "total": len(rows),
            "flops_per_token": fpt, "flops_per_token_true": truth.get("model_flops_per_token"),
            "tokens_per_s_model": inferred, "tokens_per_s_recorded": recorded,
            "mfu_bf16_pct": eff.get("mfu_bf16_pct"), "hfu_bf16_pct": eff.get("hfu_bf16_pct"), "own_mfu_pct": theirs,
            "own_mfu_from": how, "mfu_source": eff.get("mfu_source")}


def table(results: list[dict]) -> str:
    lines = ["| run | fields right | wrong or missing (inferred vs true) | MFU (bf16 peak) | trainer's own | HFU | tokens/s: model · the script's |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        bad = "; ".join(f"{x['field']} {x['inferred']} vs {x['true']}" for x in r["fields"] if not x["ok"]) or "–"

        def pct(v):
            return f"{v:.1f} %" if v is not None else "–"
        own = f"{pct(r['own_mfu_pct'])} ({r['own_mfu_from']})" if r["own_mfu_pct"] is not None else "–"
        tm, tr = r["tokens_per_s_model"], r["tokens_per_s_recorded"]
        tok = (f"{tm:,.0f}" if tm else "–") + " · " + (f"{tr:,.0f}" if tr else "–")
        if tm and tr:
            tok += f" ({100 * (tm / tr - 1):+.1f} %)"
        lines.append(f"| {r['run']} | {r['matched']}/{r['total']} | {bad} | {pct(r['mfu_bf16_pct'])} | {own} | {pct(r['hfu_bf16_pct'])} | {tok} |")
    n, m = sum(r["matched"] for r in results), sum(r["total"] for r in results)
    lines.append(f"\n{n} of {m} known fields inferred right over {len(results)} runs.")
    return "\n".join(lines)


def counts_table(results: list[dict]) -> str:
    """The runs whose truth counts active parameters (benchmarks/hf_train.py): parameters total and
    active, FLOPs per token (the headline's convention) and tokens/s, inferred against true."""
    lines = ["| run | params_total: inferred · true | params_active | FLOPs per token | tokens/s: model · the script's |",
             "|---|---|---|---|---|"]
    for r in results:
        f = {x["field"]: x for x in r["fields"]}
        if "params_active" not in f:
            continue

        def pair(name):
            if name not in f:
                return "–"
            x = f[name]
            d = f" ({100 * (x['inferred'] / x['true'] - 1):+.1f} %)" if x["inferred"] and x["true"] else ""
            return f"{x['inferred']:,} · {x['true']:,}{d}" if x["inferred"] is not None else f"– · {x['true']:,}"
        tm, tr = r["tokens_per_s_model"], r["tokens_per_s_recorded"]
        tok = (f"{tm:,.0f}" if tm else "–") + " · " + (f"{tr:,.0f}" if tr else "–")
        lines.append(f"| {r['run']} | {pair('params_total')} | {pair('params_active')} | {pair('model_flops_per_token')} | {tok} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    from workbench.format.errors import WorkbenchError

    results = []
    for name, truth in runs():
        try:
            results.append(measure(name, truth))
        except WorkbenchError as e:  # a run that wrote no trace (it ran out of memory at its first step)
            print(f"{name}: skipped: {str(e).split(': ', 1)[-1]}", file=sys.stderr)
    print(table(results))
    print()
    print(counts_table(results))
    if a.json:
        a.json.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
