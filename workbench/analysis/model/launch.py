"""The model from its launch record (``launch_rank{r}.json``, workbench.capture.launch): the first
evidence, before any trace.

The live objects said what a trace can only suggest: every parameter tensor's shape (a tied table is
one tensor, counted once), the token table and whether the head shares it, the repeated blocks, the
configuration the model was built from (Hugging Face's ``config``, torchtitan's ``model_args``), the
first forward's inputs (micro-batch and sequence), the forwards before the first optimizer step
(micro-batches), the recomputation in force, the optimizer's class and the autocast dtype. Each field
is ``{value, source, confidence}`` with ``source`` starting "the launch record"; :func:`overlay` puts
them over the trace's fields (the trace's stay where the record says nothing).
"""

from __future__ import annotations

from typing import Any

from workbench.analysis.model.context import Candidates, field

SOURCE = "the launch record"
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64", "float8_e4m3fn": "fp8"}
CONFIG = {
    "hidden": ("hidden_size", "dim", "n_embd", "d_model"),
    "layers": ("num_hidden_layers", "n_layers", "n_layer", "num_layers"),
    "heads": ("num_attention_heads", "n_heads", "n_head"),
    "kv_heads": ("num_key_value_heads", "n_kv_heads"),
    "head_dim": ("head_dim",),
    "v_head_dim": ("v_head_dim",),
    "vocab": ("vocab_size", "vocab"),
    "ffn": ("intermediate_size", "ffn_dim", "hidden_dim"),
    "experts": ("num_experts", "num_local_experts", "n_routed_experts", "moe_experts"),
    "top_k": ("num_experts_per_tok", "top_k", "moe_top_k"),
    "shared_experts": ("n_shared_experts", "num_shared_experts", "moe_shared_experts"),
    "moe_ffn": ("moe_intermediate_size",),
    "q_lora_rank": ("q_lora_rank",),
    "kv_lora_rank": ("kv_lora_rank",),
    "qk_rope_head_dim": ("qk_rope_head_dim",),
}
"""Model fields → the configuration keys that hold them (the first found wins)."""
ATTRS = {"heads": ("num_heads", "n_heads", "num_attention_heads", "n_head"),
         "kv_heads": ("num_key_value_heads", "n_kv_heads", "num_kv_heads"),
         "head_dim": ("head_dim",), "top_k": ("top_k", "num_experts_per_tok"),
         "experts": ("num_experts", "n_routed_experts", "num_local_experts")}
"""Model fields → module attributes that hold them (an attention module's, a router's)."""
INPUT_NAMES = ("input_ids", "tokens", "idx", "input", "x", "inputs")


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _config(cfg: dict) -> dict:
    merged = dict(cfg.get("text_config") or {})
    merged.update({k: v for k, v in cfg.items() if k != "text_config"})
    moe = merged.get("moe_args")
    if isinstance(moe, dict):  # torchtitan's MoE arguments
        for k, v in moe.items():
            merged.setdefault(k, v)
    return merged


def _token_input(inputs: dict | None) -> list[int] | None:
    """[batch, seq] of the first integer 2-D input (``input_ids`` and its like first)."""
    if not isinstance(inputs, dict):
        return None
    kw = inputs.get("kwargs") or {}
    cands = [kw[k] for k in INPUT_NAMES if isinstance(kw.get(k), dict)]
    cands += [a for a in inputs.get("args") or [] if isinstance(a, dict)]
    cands += [v for v in kw.values() if isinstance(v, dict)]
    for c in cands:
        if str(c.get("dtype", "")).startswith(("int", "uint")) and len(c.get("shape") or []) == 2:
            return [int(x) for x in c["shape"]]
    return None


def _rows(model: dict) -> list[dict]:
    cols = model.get("param_columns") or ["name", "shape", "dtype", "device", "module", "requires_grad", "tied_to"]
    return [dict(zip(cols, r)) for r in model.get("params") or []]


def fields(doc: dict | None) -> tuple[str | None, Candidates]:
    """The model's kind and candidate fields from one rank's launch record."""
    model = (doc or {}).get("model")
    if not isinstance(model, dict) or not model.get("params_numel"):
        return None, {}
    f: Candidates = {}
    rows = _rows(model)
    cfg = _config(model.get("config") or {})
    attrs = model.get("module_attrs") or {}
    n_tensors = len(rows) + int(model.get("params_truncated") or 0)
    f["params_total"] = field(int(model["params_numel"]), f"{SOURCE}: {n_tensors:,} parameter tensors of the live model, "
                                                         "each storage once (a tied table is one)")
    for name, keys in CONFIG.items():
        v = next((_int(cfg.get(k)) for k in keys if _int(cfg.get(k)) is not None), None)
        if v is not None:
            f[name] = field(v, f"{SOURCE}: the model's configuration ({next(k for k in keys if _int(cfg.get(k)))})")
    for name, keys in ATTRS.items():
        if name in f:
            continue
        for cls, a in attrs.items():
            v = next((_int(a.get(k)) for k in keys if _int(a.get(k)) is not None), None)
            if v is not None:
                f[name] = field(v, f"{SOURCE}: {cls}.{next(k for k in keys if _int(a.get(k)))}", "medium")
                break
    # embedding tables: the token table is the largest; the head shares it or not
    tables = [r for r in rows if r.get("module") == "Embedding" and len(r.get("shape") or []) == 2]
    tied_names = {n for pair in model.get("tied") or [] for n in pair}
    if tables:
        token = max(tables, key=lambda r: r["shape"][0] * r["shape"][1])
        vocab, hidden = token["shape"]
        f.setdefault("vocab", field(int(vocab), f"{SOURCE}: the token table {token['name']} {token['shape']}"))
        f.setdefault("hidden", field(int(hidden), f"{SOURCE}: the token table {token['name']} {token['shape']}"))
        tied = token["name"] in tied_names
        if not tied:  # a head [vocab, hidden] of its own says untied; no head at all says nothing
            heads = [r for r in rows if r.get("module") != "Embedding" and r.get("shape") == [vocab, hidden]]
            tied = None if not heads else False
        if tied is not None:
            f["tied"] = field(bool(tied), f"{SOURCE}: " + ("the output head is the token table (one tensor)" if tied
                                                          else "the output head is a tensor of its own"))
        emb = sum(r["shape"][0] * r["shape"][1] for r in tables if r.get("tied_to") is None
                  and not (tied and r["name"] == token["name"]))
        f["params_embedding"] = field(int(emb), f"{SOURCE}: input embedding tables" +
                                      (" (the tied token table counts as the head)" if tied else ""))
        f["params_non_embedding"] = field(int(model["params_numel"]) - int(emb), "params_total − params_embedding")
    blocks = model.get("blocks") or {}
    if "layers" not in f and _int(blocks.get("count")):
        f["layers"] = field(int(blocks["count"]), f"{SOURCE}: {blocks['count']} {blocks.get('class')} blocks in "
                                                  f"{blocks.get('path') or 'the model'}", "medium")
    _experts(f, rows, blocks)
    if "routed" not in f:  # a dense model's configuration may still carry MoE defaults (torchtitan's Qwen3)
        for k in ("experts", "top_k", "shared_experts", "moe_ffn"):
            f.pop(k, None)
    _mlp(f, rows, blocks)
    if "heads" in f and "kv_heads" in f:
        h, kv = f["heads"]["value"], f["kv_heads"]["value"]
        f["attention"] = field("MHA" if kv == h else "MQA" if kv == 1 else "GQA", f"{SOURCE}: {h} heads, {kv} kv heads")
    if "heads" in f and "head_dim" not in f and "hidden" in f and f["hidden"]["value"] % f["heads"]["value"] == 0:
        f["head_dim"] = field(f["hidden"]["value"] // f["heads"]["value"], "hidden / heads", "medium")
    if any(str(r.get("name", "")).endswith(("q_norm.weight", "k_norm.weight")) for r in rows):
        f["qk_norm"] = field(True, f"{SOURCE}: q_norm / k_norm weights in the blocks")
    bs = _token_input(doc.get("inputs"))
    if bs:
        f["micro_batch"] = field(bs[0], f"{SOURCE}: the first forward's token input {bs}")
        f["seq"] = field(bs[1], f"{SOURCE}: the first forward's token input {bs}")
        passes = _int(doc.get("forwards_before_first_step"))
        if passes:
            f["micro_batches"] = field(passes, f"{SOURCE}: {passes} forward(s) of the model before its first optimizer step")
            f["tokens_per_step"] = field(bs[0] * bs[1] * passes, "micro_batch × seq × micro_batches")
    dtype = _dtype(doc, model)
    if dtype:
        f["dtype"] = dtype
    rec = (doc.get("recompute") or {})
    if rec.get("mode") and rec["mode"] != "unknown":
        plain = {"selective-op": "selective", "selective-layer": "selective", "partial": "selective"}.get(rec["mode"], rec["mode"])
        f["recompute"] = field(plain, f"{SOURCE}: {rec['mode']}: {rec.get('basis', '')}".rstrip(": "),
                               rec.get("confidence", "high"))
        mode = _planner_mode(rec)
        if mode is not None:
            f["recompute_mode"] = field(mode, f"{SOURCE}: {rec['mode']}: {rec.get('basis', '')}".rstrip(": "),
                                        rec.get("confidence", "high"))
    opt = (doc.get("optimizer") or {}).get("class")
    if opt:
        f["optimizer"] = field(opt.rsplit(".", 1)[-1].lower(), f"{SOURCE}: the optimizer object ({opt})")
    kind = "transformer" if ("heads" in f or ("vocab" in f and "layers" in f)) else "other"
    return kind, f


def _planner_mode(rec: dict) -> str | None:
    """The recomputation in the planner's words (workbench.plan.recompute, as ``recompute_mode`` of the
    trace's analysis): ``op`` (a selective policy), ``layer:N`` (every N-th block whole), ``selective``
    (checkpoints around functions inside the blocks: an attention core), ``hf`` (Hugging Face's gradient
    checkpointing); None for none and full, which ``recompute`` says."""
    mode = rec.get("mode")
    if mode == "selective-op":
        return "op"
    if mode == "selective-layer" and isinstance(rec.get("every"), int) and rec["every"] > 1:
        return f"layer:{rec['every']}"
    if mode == "partial":
        return "selective"
    if mode == "full" and ((rec.get("static") or {}).get("hf_gradient_checkpointing") or {}).get("on"):
        return "hf"
    return None


def _dtype(doc: dict, model: dict) -> dict | None:
    auto = doc.get("autocast") or {}
    if auto:
        d = next(iter(auto.values()))
        return field(DTYPES.get(d, d), f"{SOURCE}: autocast to {d}")
    by = model.get("params_by_dtype") or {}
    if by:
        d = max(by, key=by.get)
        return field(DTYPES.get(d, d), f"{SOURCE}: the parameters' dtype ({d}, no autocast)", "medium")
    return None


def _experts(f: Candidates, rows: list[dict], blocks: dict) -> None:
    """Routed experts from the parameters: 3-D expert weights [E, …] (grouped GEMMs), or a
    ``experts.N.`` list; the blocks that hold them; the routed experts' parameters (``routed``)."""
    routed = [r for r in rows if ".experts." in f".{r['name']}" and "shared" not in r["name"]]
    if not routed:
        return
    three = [r for r in routed if len(r["shape"]) == 3]
    n = 0
    if three:
        n = three[0]["shape"][0]
    else:
        ids = {r["name"].split(".experts.", 1)[1].split(".", 1)[0] for r in routed if ".experts." in r["name"]}
        n = len([i for i in ids if i.isdigit()])
    if n and "experts" not in f:
        f["experts"] = field(int(n), f"{SOURCE}: routed expert weights " + (f"{three[0]['shape']}" if three else f"of {n} experts"))
    f["routed"] = field(int(sum(_numel(r["shape"]) for r in routed)), f"{SOURCE}: the routed experts' parameters")
    path = blocks.get("path")
    if path is not None:
        prefix = f"{path}." if path else ""
        moe = {r["name"][len(prefix):].split(".", 1)[0] for r in routed if r["name"].startswith(prefix)}
        if moe:
            f["moe_layers"] = field(len(moe), f"{SOURCE}: blocks holding routed experts")
            if blocks.get("count"):
                f["dense_layers"] = field(int(blocks["count"]) - len(moe), f"{SOURCE}: blocks without routed experts")


def _mlp(f: Candidates, rows: list[dict], blocks: dict) -> None:
    """The dense MLP's width and gate, from the first block without experts: its 2-D weights named
    like an MLP (``mlp``, ``feed_forward``, ``ffn``) whose other side is the hidden size."""
    hidden = (f.get("hidden") or {}).get("value")
    path = blocks.get("path")
    if not hidden or path is None or "ffn" in f:
        return
    prefix = f"{path}." if path else ""
    by_block: dict[str, list[dict]] = {}
    for r in rows:
        if r["name"].startswith(prefix) and len(r["shape"]) == 2:
            by_block.setdefault(r["name"][len(prefix):].split(".", 1)[0], []).append(r)
    for rs in by_block.values():
        mlp = [r for r in rs if any(k in r["name"] for k in ("mlp", "feed_forward", "ffn")) and ".experts." not in r["name"]
               and "gate.weight" not in r["name"]]
        widths = [x for r in mlp for x in r["shape"] if x != hidden]
        if mlp and widths:
            w = max(set(widths), key=widths.count)
            f["ffn"] = field(int(w), f"{SOURCE}: the MLP weights of a block ({len(mlp)} of {w} × {hidden})", "medium")
            f["gated"] = field(len(mlp) >= 3, f"{SOURCE}: {len(mlp)} MLP weights per block", "medium")
            return


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def overlay(block: dict, docs: dict[int, dict | None]) -> dict:
    """The run's ``model`` block with the launch record's fields over the trace's (the record first,
    the trace where the record says nothing); ``source`` of each field says which. ``docs``: rank →
    launch record. A run without one keeps its block as it is."""
    from workbench.analysis.model import FIELDS, flops_per_token
    from workbench.analysis.model.parameters import active

    doc = next((d for _, d in sorted(docs.items()) if isinstance(d, dict) and d.get("model")), None)
    kind, lf = fields(doc)
    if not lf:
        return block
    out = dict(block or {})
    f = dict(out.get("fields") or {})
    routed = lf.pop("routed", {}).get("value")
    world = (doc.get("model") or {}).get("distributed", {}).get("world_size")
    for name, cand in lf.items():
        f[name] = cand
    if "micro_batch" in f and "seq" in f and "tokens_per_step" in lf:
        dp = ((f.get("layout") or {}).get("value") or {}).get("dp") or world or 1
        f["global_tokens_per_step"] = field(int(lf["tokens_per_step"]["value"]) * int(dp),
                                            f"tokens_per_step × dp {dp}")
    if routed and f.get("experts") and f.get("top_k"):
        f["params_active"] = active(f["params_total"], routed, f)
    elif not f.get("experts"):
        f["params_active"] = field(f["params_total"]["value"], "params_total (no experts: every parameter is active)")
    fpt = flops_per_token({k: v for k, v in f.items()})
    if fpt is not None:
        f["model_flops_per_token"] = fpt
    out["kind"] = out.get("kind") or kind
    out.setdefault("convention", "torchtitan")
    out["fields"] = {k: f[k] for k in FIELDS if k in f and f[k] is not None}
    out["launch_record"] = True
    return out


__all__ = ["SOURCE", "fields", "overlay"]
