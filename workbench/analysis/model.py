"""The model behind a trace: its size, shape, tokens, recomputation, layout and optimizer, inferred
from what a trace recorded with ``record_shapes=True`` holds. No I/O; a trace in, a dict out.

Signals (docs/measured.md, "The model behind a trace"; every one is a name or a shape the profiler wrote):

- **parameters**: ``torch::autograd::AccumulateGrad`` runs once per trainable parameter tensor and
  backward pass with the gradient's shape (kineto.MODEL_OP): their sizes add up to the parameters,
  a tied table counted once. FSDP2 accumulates into the gathered (full) parameters; tensor
  parallelism into local shards. Without them (no backward): the weights the forward GEMMs
  multiply by plus the embedding tables, a lower bound.
- **embedding**: ``aten::embedding``'s ``Input Dims`` are ``[[rows, hidden], [batch, seq], …]``;
  the table with most rows is the token table (``vocab``, ``hidden``, ``micro_batch``, ``seq``),
  the others are position or type tables. Tied: one gradient of the table's shape while a GEMM
  multiplies by its transpose (the output head); two gradients: untied.
- **attention** (analysis.flops.ATTENTION): the query's shape gives heads, head dim and sequence;
  the forward calls per forward pass give the attention layers; the key's heads (or K/V projection
  widths, when K/V were repeated before the kernel) the KV heads.
- **the forward GEMMs' weights** (``[in, out]`` as the op sees ``W.t()``): the FFN width is the input
  of the projections back to ``hidden``; two up-projections per layer (or one of twice the width)
  mean a gated MLP.
- **micro-batches**: forward passes per optimizer step, as forward → backward transitions (a
  pipeline stage: its ``Forward i`` actions).
- **recomputation**: forward ops re-run inside a backward node's span
  (``autograd::engine::evaluate_function: …``, kineto.BACKWARD_NODE; activation checkpointing runs
  its recompute there): attention forwards and forward GEMMs (``addmm``, a ``mm`` under
  ``aten::linear``/``aten::matmul``, convolutions) inside backward, per layer and by FLOPs.
- **layout**: ``distributedInfo`` (world size, DeviceMesh groups named ``mesh_<dim>``), FSDP2's
  ``FSDP::`` annotations (a module gathered twice per forward pass reshards after forward:
  ZeRO-3), DDP's ``DistributedDataParallel.forward``, ``ZeroRedundancyOptimizer`` (ZeRO-1),
  pipeline actions and point-to-point ops, collectives issued during forward outside FSDP
  (tensor parallelism).
- **optimizer**: ``Optimizer.step#AdamW.step``; fused (``aten::_fused_*``) or foreach
  (``aten::_foreach_*``) from the ops inside it.

:func:`rank_model` is one rank's view (a frame, computed next to the trace);
:func:`workbench.analysis.model_run.run_model` merges the ranks into the run's ``model`` block of
``workbench analyze --json``. A field the trace
cannot support is left out (absent), never guessed; each one says how it was found and how sure.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from workbench.format import kineto
from workbench.analysis.flops import ATTENTION
from workbench.analysis.intervals import merge, str_mask
from workbench.load.trace import Trace

CONVENTION = ("6*N_non_embedding + 12*L*h*s FLOPs per token (PaLM appendix B; attention counted in full, "
              "no causal halving, no recomputation)")
"""What ``model_flops_per_token`` counts: N the parameters without the input embedding tables (a
tied table counts once, as the output head; position tables are left out), L attention layers, h
= heads × head dim, s the sequence. What nanoGPT, torchtitan and Megatron-LM print MFU against."""

FIELDS = ("params_total", "params_embedding", "params_non_embedding", "layers", "hidden", "heads", "kv_heads",
          "head_dim", "ffn", "gated", "vocab", "tied", "seq", "micro_batch", "micro_batches", "tokens_per_step",
          "global_tokens_per_step", "dtype", "recompute", "recompute_fraction", "layout", "optimizer",
          "model_flops_per_token")
"""The names of the ``model.fields`` block, in the order the JSON lists them."""
TRANSFORMER_FIELDS = frozenset({"layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "gated", "vocab", "tied",
                                "seq", "params_embedding", "params_non_embedding", "model_flops_per_token",
                                "tokens_per_step", "global_tokens_per_step"})

RECOMPUTE_MIN = 0.02
"""Forward FLOPs re-run inside backward below 2 % of the forward's are no recomputation (a loss or
a norm recomputed by a fused kernel's backward is not activation checkpointing)."""
FULL_MIN = 0.6
"""Recomputation is ``full`` when every attention layer re-ran and ≥ 60 % of the blocks' forward
GEMM FLOPs did. Not 100 %: non-reentrant checkpointing stops recomputing once every saved tensor
is back, so a block's last GEMM (the MLP's down projection, whose output backward does not need)
never re-runs — 69 % of the blocks' forward FLOPs on the 370M GPT with every block checkpointed
(traces/plan_gpu_370m_b16_ac), ~73 % on a Llama-shaped block. Recomputing only attention and its
projections (a selective policy) re-runs ~35 %; the output head is outside the blocks."""

_FWD_ATTENTION = frozenset(n for n in ATTENTION if "backward" not in n)
_FORWARD_ONLY = frozenset({"aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::convolution", "aten::_scaled_mm"})
"""Counted ops that backward formulas never call (a linear's backward multiplies with ``mm``)."""
_FORWARD_CONTAINERS = ("aten::linear", "aten::matmul")
_OPTIMIZER = re.compile(r"^Optimizer\.step#(\w+)\.step$")
_FUSED_STEP = re.compile(r"^aten::_fused_(?:adam|adamw|sgd|adagrad)_?$")
"""torch.optim's fused steps (``fused=True``); other ``aten::_fused_*`` ops (rms_norm, dropout) are not."""
_MESH = re.compile(r"^mesh_(\w+)$")
"""DeviceMesh's process groups (torchtitan, torch's tensor parallel): ``mesh_dp_shard``, ``mesh_tp`` …"""
_GROUP_DESC = {"TENSOR_MODEL_PARALLEL_GROUP": "tp", "PIPELINE_MODEL_PARALLEL_GROUP": "pp",
               "DATA_PARALLEL_GROUP": "dp", "CONTEXT_PARALLEL_GROUP": "cp"}
"""Megatron-LM's ``group_desc`` for its process groups (``parallel_state.initialize_model_parallel``)."""
_FLASH_ATTN = ("flash_attn::_flash_attn_forward", "flash_attn::_flash_attn_varlen_forward")
"""The flash-attn package's forward ops: q ``[batch, seq, heads, dim]`` (varlen: ``[tokens, heads, dim]``)."""
_DDP = "DistributedDataParallel.forward"
_FSDP_AG = re.compile(r"^FSDP::all_gather \((.+)\)$")
_TP_OPS = frozenset({"all_reduce", "reduce_scatter", "all_gather"})


def field(value: Any, source: str, confidence: str = "high") -> dict[str, Any]:
    """One entry of ``model.fields``."""
    return {"value": value, "source": source, "confidence": confidence}


# ---- one rank --------------------------------------------------------------------------------------

class _Spans:
    """Intervals per thread, merged, with a point-in-interval test."""

    def __init__(self, ev: pd.DataFrame, mask: np.ndarray) -> None:
        self.by_tid: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        sub = ev[mask]
        for tid, g in sub.groupby("tid", observed=True):
            s, e = merge(g["ts_us"].to_numpy(), (g["ts_us"] + g["dur_us"]).to_numpy())
            self.by_tid[str(tid)] = (s, e)

    def __bool__(self) -> bool:
        return bool(self.by_tid)

    def inside(self, tids: np.ndarray, ts: np.ndarray) -> np.ndarray:
        out = np.zeros(len(ts), dtype=bool)
        for tid, (s, e) in self.by_tid.items():
            m = tids == tid
            if not m.any():
                continue
            i = np.searchsorted(s, ts[m], side="right") - 1
            out[m] = (i >= 0) & (ts[m] < e[np.clip(i, 0, None)])
        return out


def _window_bounds(windows: pd.DataFrame) -> list[tuple[int, float, float]]:
    if windows is None or windows.empty:
        return []
    lo, hi = ("host_start_us", "host_end_us") if "host_start_us" in windows else ("start_us", "end_us")
    w = windows.sort_values(lo)
    return [(int(s), float(a), float(b)) for s, a, b in w[["step", lo, hi]].itertuples(index=False)]


def _median(values: list) -> float | None:
    v = [x for x in values if x is not None]
    return float(np.median(v)) if v else None


def rank_model(trace: Trace, windows: pd.DataFrame, ops: pd.DataFrame) -> dict[str, Any]:
    """One rank's model: ``{"kind", "fields": {NAME: field}, "evidence": {...}}``.

    ``windows``: analysis.steps.step_windows; ``ops``: the counted ops that ran (the efficiency
    frame's ``ops``: analysis.flops.op_flops, on GPU traces only those that launched kernels).
    Fields are this rank's: local shards under tensor parallelism, this stage's layers under
    pipelining; :func:`run_model` makes them the model's. Empty fields when the trace has no
    shapes or no step."""
    ev = trace.events
    bounds = _window_bounds(windows)
    out: dict[str, Any] = {"kind": None, "fields": {}, "evidence": {}}
    if "op_args" not in ev or not bounds or ev.empty:
        return out
    names = ev["name"]
    bwd = _Spans(ev, str_mask(names, lambda c: c.str.startswith(kineto.BACKWARD_NODE)))
    has_args = ev["op_args"].notna().to_numpy()
    a = ev[has_args]  # a few thousand rows: strings only here, never per event of the trace
    args = pd.DataFrame({"ts_us": a["ts_us"].to_numpy(), "tid": np.asarray(a["tid"].astype(str).to_numpy(), dtype=object),
                         "name": np.asarray(a["name"].astype(str).to_numpy(), dtype=object),
                         "args": a["op_args"].to_numpy()})
    args["in_bwd"] = bwd.inside(args["tid"].to_numpy(), args["ts_us"].to_numpy())
    by_key = dict(zip(zip(args["ts_us"], args["name"]), args["args"]))
    step_of = _stepper(bounds)
    args["step"] = step_of(args["ts_us"].to_numpy())

    ops = ops.copy() if ops is not None and not ops.empty else pd.DataFrame(columns=["ts_us", "tid", "name", "kind", "dtype", "flops"])
    ops["tid"] = ops["tid"].astype(str)
    ops["in_bwd"] = bwd.inside(ops["tid"].to_numpy(dtype=object), ops["ts_us"].to_numpy(dtype=float))
    ops["step"] = step_of(ops["ts_us"].to_numpy(dtype=float))
    containers = _Spans(ev, str_mask(names, lambda c: c.isin(_FORWARD_CONTAINERS)))
    in_container = containers.inside(ops["tid"].to_numpy(dtype=object), ops["ts_us"].to_numpy(dtype=float))
    is_attn_fwd = ops["name"].isin(_FWD_ATTENTION).to_numpy()
    # outside backward every counted op is forward work (a compiled graph's mm has no aten::linear
    # around it); inside, only what backward formulas never call, or a mm under a forward container
    ops["forward"] = ~ops["in_bwd"].to_numpy() | is_attn_fwd | ops["name"].isin(_FORWARD_ONLY).to_numpy() | (
        ops["name"].isin(["aten::mm", "aten::bmm"]).to_numpy() & in_container)
    ops["dims"] = [getattr(by_key.get((t, n)), "dims", None) for t, n in zip(ops["ts_us"], ops["name"])]

    steps = sorted({s for s, _, _ in bounds})
    f = out["fields"]
    evid = out["evidence"]
    evid["steps"] = len(steps)

    # micro-batches: backward passes per step. Every backward pass accumulates every trainable
    # parameter's gradient once, so the step's AccumulateGrads over the first pass's are the passes
    # (a pipeline's warm-up runs several forwards before the first backward: forward → backward
    # transitions would miss those); then the pipeline's Forward i actions; then the transitions.
    first = steps[0]
    fwd_first = ops[(ops["step"] == first) & ops["forward"] & ~ops["in_bwd"]]
    b_first = _bwd_starts(ev, names, first, step_of)
    b0 = float(b_first.min()) if len(b_first) else np.inf
    after = fwd_first[fwd_first["ts_us"] > b0]["ts_us"]
    pass_end = float(after.min()) if len(after) else np.inf
    acc = args[(args["name"] == "torch::autograd::AccumulateGrad") & (args["step"] == first)]
    acc_first = acc[(acc["ts_us"] >= b0) & (acc["ts_us"] < pass_end)]
    if np.isinf(pass_end) and len(acc):
        # every backward after every forward (GPipe, or one pass): the passes repeat the same
        # sequence of gradient shapes; its shortest period is one pass
        seq = [tuple(x.dims[0]) if x.dims else () for x in acc["args"]]
        period = next((p for p in range(1, len(seq) + 1) if len(seq) % p == 0 and seq == seq[:p] * (len(seq) // p)), len(seq))
        acc_first = acc.iloc[:period]
    if len(acc_first):
        mb = len(acc) / len(acc_first)
        f["micro_batches"] = field(int(round(mb)), f"{len(acc)} parameter gradients accumulated per step / {len(acc_first)} "
                                   "in the first backward pass", "high" if mb.is_integer() else "medium")
    pp_fwd = ev[str_mask(names, lambda c: c.str.match(kineto.PP_FORWARD.pattern))]
    if "micro_batches" not in f and len(pp_fwd):
        pp_steps = step_of(pp_fwd["ts_us"].to_numpy())
        mb = _median([int((pp_steps == s).sum()) for s in steps])
        if mb:
            f["micro_batches"] = field(int(mb), "pipeline 'Forward i' actions per step on this stage")
    if "micro_batches" not in f:
        per = [_transitions(ops[(ops["step"] == s) & ops["forward"] & ~ops["in_bwd"]]["ts_us"].to_numpy(float),
                            _bwd_starts(ev, names, s, step_of)) for s in steps]
        mb = _median(per)
        if mb:
            f["micro_batches"] = field(int(round(mb)), "forward passes per step (forward → backward transitions)", "medium")
    n_mb = f["micro_batches"]["value"] if "micro_batches" in f else None
    # forward passes before the first backward (a pipeline's warm-up: several), by the share of
    # the step's forward compute that ran before it
    n_fwd = len(ops[(ops["step"] == first) & ops["forward"] & ~ops["in_bwd"]])
    before = len(fwd_first[fwd_first["ts_us"] < b0])
    passes_before = max(int(round(before / n_fwd * n_mb)), 1) if n_mb and n_fwd else 1

    # embeddings
    emb = args[(args["name"] == "aten::embedding") & ~args["in_bwd"] & (args["step"] >= -1)]
    tables = Counter()
    token = None
    for r in emb.itertuples(index=False):
        d = r.args.dims
        if len(d) >= 2 and len(d[0]) == 2:
            tables[tuple(d[0])] += 1
    if tables:
        token_table = max(tables, key=lambda t: (t[0], tables[t]))
        calls = emb[[len(x.dims[0]) == 2 and tuple(x.dims[0]) == token_table for x in emb["args"]]]
        token = calls["args"].iloc[0].dims[1]
        f["vocab"] = field(int(token_table[0]), f"aten::embedding table {list(token_table)} (the largest looked up)")
        f["hidden"] = field(int(token_table[1]), f"aten::embedding table {list(token_table)}")
        evid["tables"] = {f"{t[0]}x{t[1]}": n for t, n in tables.items()}
        evid["token_table"] = list(token_table)
        per_step = [int((calls["step"] == s).sum()) for s in steps]
        evid["token_lookups_per_step"] = _median(per_step)
        if len(token) == 2:
            f["micro_batch"] = field(int(token[0]), f"aten::embedding input {list(token)} = [batch, seq]")
            f["seq"] = field(int(token[1]), f"aten::embedding input {list(token)} = [batch, seq]")
        elif len(token) == 1:
            evid["flat_tokens"] = int(token[0])

    # attention
    att = ops[is_attn_fwd & ops["dims"].notna().to_numpy()]
    att_out = att[~att["in_bwd"]]
    attention = ATTENTION
    if att_out.empty:  # the flash-attn package's ops (not counted as FLOPs: analysis.flops knows aten's)
        fa = args[args["name"].isin(_FLASH_ATTN)]
        att_out = fa[~fa["in_bwd"]].assign(dims=[x.dims for x in fa[~fa["in_bwd"]]["args"]])
        att = fa.assign(dims=[x.dims for x in fa["args"]])
        attention = {n: (0, 1, -1, "bshd") for n in _FLASH_ATTN}
    if not att_out.empty:
        qi, ki, _, layout = attention[att_out["name"].iloc[0]]
        d = att_out["dims"].iloc[0]
        q, k = d[qi], d[ki]
        if len(q) == 3 and len(k) == 3:  # varlen: [tokens, heads, dim], sequences packed
            q, k = [1, *q], [1, *k]
            evid["packed_sequences"] = True
        if len(q) == 4 and len(k) == 4:
            b, h, s, hd = (q[0], q[2], q[1], q[3]) if layout == "bshd" else tuple(q)
            kh = k[2] if layout == "bshd" else k[1]
            f["heads"] = field(int(h), f"{att_out['name'].iloc[0]} query {list(q)}")
            f["head_dim"] = field(int(hd), f"{att_out['name'].iloc[0]} query {list(q)}")
            evid["attention_kv_heads"] = int(kh)
            if evid.get("packed_sequences"):
                s = b = None  # one packed batch: its length is no sequence's
            if "seq" in f and "micro_batch" in f and (f["seq"]["value"], f["micro_batch"]["value"]) == (b, s) and b != s:
                # the embedding's input was [seq, batch] (sequence-first): the attention says which
                f["seq"], f["micro_batch"] = (field(int(s), f"{att_out['name'].iloc[0]} query {list(q)} (the embedding's input is "
                                                    f"[seq, batch])"), field(int(b), f"{att_out['name'].iloc[0]} query {list(q)}"))
            if "seq" not in f and s:
                f["seq"] = field(int(s), f"{att_out['name'].iloc[0]} query {list(q)}", "medium")
            if "micro_batch" not in f and b:
                f["micro_batch"] = field(int(b), f"{att_out['name'].iloc[0]} query {list(q)}", "medium")
            if "hidden" not in f:
                f["hidden"] = field(int(h * hd), "heads × head_dim of the attention's query", "medium")
        per_step = [int((att_out["step"] == s).sum()) for s in steps]
        calls = _median(per_step)
        if calls and n_mb:
            layers = calls / n_mb
            f["layers"] = field(int(round(layers)), f"{int(calls)} attention forwards per step / {n_mb} forward passes",
                                "high" if float(layers).is_integer() else "medium")
    if "seq" in f and "micro_batch" not in f and "flat_tokens" in evid:
        f["micro_batch"] = field(evid["flat_tokens"] // f["seq"]["value"], "flattened embedding input / seq", "medium")

    # forward weights of the forward passes before the first backward, per pass
    fw = fwd_first[(fwd_first["ts_us"] < b0) & fwd_first["name"].isin(list(kineto.WEIGHT_OPS))]
    ws = [w for w in (_weight(n, d) for n, d in zip(fw["name"], fw["dims"])) if w is not None]
    weights = Counter({w: c / passes_before for w, c in Counter(ws).items()})
    evid["weights"] = {f"{i}x{o}": n for (i, o), n in weights.items()}
    hidden = f["hidden"]["value"] if "hidden" in f else None
    n_layers = f["layers"]["value"] if "layers" in f else None
    # the output head is the pass's last GEMM, from hidden to something wider (a pipeline's last
    # stage has a head and no embedding); it is not an MLP's up-projection
    head_w = ws[-1] if ws and hidden and ws[-1][0] == hidden and ws[-1][1] > hidden else None
    if head_w and "vocab" not in f and n_layers is not None:
        f["vocab"] = field(int(head_w[1]), f"the output head's width (the forward's last GEMM, {hidden}→{head_w[1]})", "medium")
    mlp = Counter(weights)
    if head_w:
        mlp[head_w] -= 1
    if hidden and weights:
        down = Counter({i: n for (i, o), n in mlp.items() if o == hidden and i != hidden and n > 0})
        if down:
            ffn, per_pass = down.most_common(1)[0]
            if not n_layers or per_pass >= n_layers * 0.5:
                up = sum(c for (i, o), c in mlp.items() if i == hidden and o == ffn)
                fused = sum(c for (i, o), c in mlp.items() if i == hidden and o == 2 * ffn)
                f["ffn"] = field(int(ffn), f"input width of the {per_pass:g} projections back to hidden {hidden} per forward pass")
                f["gated"] = field(bool(up >= 2 * per_pass or fused >= per_pass),
                                   f"{up:g} up-projections {hidden}→{ffn} (+{fused:g} fused {hidden}→{2 * ffn}) per {per_pass:g} down-projections")
        if "layers" not in f and "ffn" in f and "vocab" in f:
            # no attention op the analysis knows (a fused kernel of another library): one MLP per layer
            n = int(round(down[f["ffn"]["value"]]))
            if n >= 2:
                f["layers"] = field(n, f"{n} MLP down-projections {f['ffn']['value']}→{hidden} per forward pass "
                                       "(no attention op recognised)", "medium")
        if "vocab" in f:
            v = f["vocab"]["value"]
            evid["head_gemms"] = weights.get((hidden, v), 0)
    # KV heads: the key's heads, or the K/V projections' width when K/V were repeated first
    if "head_dim" in f and "heads" in f:
        hd, h = f["head_dim"]["value"], f["heads"]["value"]
        kv = evid.get("attention_kv_heads")
        if kv and kv < h:
            f["kv_heads"] = field(int(kv), "the attention's key heads")
        else:
            narrow = sorted({o // hd for (i, o), c in weights.items()
                             if hidden and i == hidden and o % hd == 0 and 0 < o // hd < h and n_layers and c >= 2 * n_layers})
            if narrow:
                f["kv_heads"] = field(int(narrow[0]), f"K/V projections {hidden}→{narrow[0] * hd} (K/V repeated before the kernel)", "medium")
            else:
                f["kv_heads"] = field(int(h), "the attention's key heads = query heads, no narrower K/V projection", "medium" if kv is None else "high")

    # parameters: AccumulateGrad, once per parameter and backward pass; a pipeline stage's input
    # (a leaf that requires grad) accumulates one too, of an activation's shape: not a parameter
    act = (f["micro_batch"]["value"] * f["seq"]["value"] * hidden) if "micro_batch" in f and "seq" in f and hidden else None
    shapes = [tuple(x.dims[0]) for x in acc_first["args"] if x.dims and x.dims[0]]
    shapes = [sh for sh in shapes if not (len(sh) >= 3 and act and int(np.prod(sh)) == act)]
    shape_count = Counter(shapes)
    if shapes:
        total = sum(int(np.prod(sh)) for sh in shapes)
        f["params_total"] = field(int(total), f"{len(shapes)} parameter tensors' gradients (torch::autograd::AccumulateGrad) "
                                               "in the first backward pass")
        evid["param_tensors"] = len(shapes)
        shape_count = Counter(shapes)
        if "token_table" in evid:
            t = tuple(evid["token_table"])
            grads = shape_count.get(t, 0)
            # GEMMs multiplying by a [vocab, hidden] weight: the head, and any layer of that shape
            gemms = weights.get((t[1], t[0]), 0)
            if gemms and grads == gemms:
                f["tied"] = field(True, f"{grads} gradient(s) of the {list(t)} table's shape for {gemms:g} GEMM weight(s) of "
                                        "that shape: the table is one of them (the output head)")
            elif gemms and grads == gemms + 1:
                f["tied"] = field(False, f"{grads} gradients of the {list(t)} table's shape for {gemms:g} GEMM weight(s) of "
                                         "that shape: the table is a parameter of its own")
            elif not gemms and not trace.comms.empty and not trace.comms["name"].astype(str).str.match(kineto.P2P_OP.pattern).any():
                # (a pipeline's first stage has no head: the last stage's may share the table)
                f["tied"] = field(False, "no GEMM multiplies by the token table", "medium")
    elif weights:
        total = sum(int(np.prod(w)) for w in weights) + sum(int(np.prod(t)) for t in tables)
        f["params_total"] = field(int(total), "forward GEMM weights plus embedding tables (no backward: a lower bound)", "low")
    if "params_total" in f and not tables and head_w:
        # no embedding op (a compiled graph gathers with its own kernel): the head's [vocab, hidden]
        # gradients say whether a token table of that shape is a parameter of its own
        t = (head_w[1], head_w[0])
        grads, gemms = shape_count.get(t, 0), weights.get(head_w, 0)
        if gemms and grads in (gemms, gemms + 1):
            f["tied"] = field(grads == gemms, f"{grads} gradient(s) of the head's {list(t)} shape for {gemms:g} GEMM weight(s) "
                                              "of that shape (no embedding op in the trace)", "medium")
            tables = Counter({t: 1}) if grads == gemms + 1 else Counter()
            evid["token_table"] = list(t)
            if not tables:  # tied: the table is the head; position tables are not seen
                f["params_embedding"] = field(0, "the token table is the tied head; no embedding op shows position tables", "low")
    if "params_total" in f and tables:
        tied = f.get("tied", {}).get("value")
        token_table = tuple(evid["token_table"])
        emb_params = sum(int(np.prod(t)) for t in tables if not (tied and t == token_table))
        f["params_embedding"] = field(emb_params, "input embedding tables" + (" (the tied token table counts as the head)" if tied else ""),
                                      "high" if "tied" in f else "medium")
        f["params_non_embedding"] = field(f["params_total"]["value"] - emb_params, "params_total − params_embedding",
                                          min(f["params_total"]["confidence"], f["params_embedding"]["confidence"], key=_rank))

    if "params_total" in f and "params_embedding" in f and "params_non_embedding" not in f:
        f["params_non_embedding"] = field(f["params_total"]["value"] - f["params_embedding"]["value"], "params_total − params_embedding",
                                          min(f["params_total"]["confidence"], f["params_embedding"]["confidence"], key=_rank))

    # tokens per optimizer step
    if "micro_batch" in f and "seq" in f and n_mb:
        tok = f["micro_batch"]["value"] * f["seq"]["value"] * n_mb
        f["tokens_per_step"] = field(int(tok), f"micro_batch {f['micro_batch']['value']} × seq {f['seq']['value']} × {n_mb} forward passes",
                                     min(f["micro_batch"]["confidence"], f["seq"]["confidence"], key=_rank))

    # dtype: the GEMMs' (and attention's) FLOPs by the dtype that ran
    comp = ops[ops["kind"].isin(["gemm", "attention", "conv"])] if "kind" in ops else ops.iloc[0:0]
    if not comp.empty and comp["flops"].sum() > 0:
        by = comp.groupby("dtype")["flops"].sum()
        top = str(by.idxmax())
        f["dtype"] = field(top, f"{100 * by.max() / by.sum():.0f}% of the GEMM/attention FLOPs ran in {top}")

    # the executed count halves causal attention (analysis.flops); the convention does not
    att_all = ops[ops["kind"] == "attention"] if "kind" in ops else ops.iloc[0:0]
    if not att_all.empty and att_all["flops"].sum() > 0 and "causal" in att_all:
        evid["causal_attention_pct"] = round(100.0 * float(att_all.loc[att_all["causal"].astype(bool), "flops"].sum())
                                             / float(att_all["flops"].sum()), 1)

    # recomputation
    rec = _recompute(ops, steps, n_layers, evid.get("token_table"), hidden)
    if rec:
        f.update(rec)

    # optimizer
    opt = _optimizer(ev, names)
    if opt:
        f["optimizer"] = opt

    out["evidence"]["layout"] = _layout_evidence(trace, ev, names, ops, bwd, steps, step_of, n_mb)
    has_conv = (ops["kind"] == "conv").any() if "kind" in ops else False
    if not att_out.empty or ("vocab" in f and "layers" in f):
        out["kind"] = "transformer"
    elif has_conv:
        out["kind"] = "convnet"
        # a convnet has no tokens; its first convolution's input is the batch
        conv = ops[(ops["kind"] == "conv") & ~ops["in_bwd"] & (ops["step"] == first)]
        d = conv["dims"].iloc[0] if not conv.empty else None
        if d and len(d[0]) >= 3:
            f["micro_batch"] = field(int(d[0][0]), f"the first convolution's input {list(d[0])}")
        for k in list(f):
            if k in TRANSFORMER_FIELDS:
                f.pop(k)
    elif not ops.empty:
        out["kind"] = "other"
        # without attention, an embedding's [a, b] input may be [seq, batch] (an RNN's layout)
        for k in list(f):
            if k in TRANSFORMER_FIELDS or k == "micro_batch":
                f.pop(k)
    if out["kind"] != "transformer" and "recompute" in f and f["recompute"]["value"] != "none":
        for k in ("recompute", "recompute_fraction"):  # no attention layers to count it per layer by
            f[k]["confidence"] = "medium"
    return out


def _rank(c: str) -> int:
    return {"low": 0, "medium": 1, "high": 2}[c]


def _stepper(bounds):
    lo = np.array([b[1] for b in bounds])
    hi = np.array([b[2] for b in bounds])
    st = np.array([b[0] for b in bounds])

    def step_of(ts: np.ndarray) -> np.ndarray:
        i = np.searchsorted(lo, ts, side="right") - 1
        ok = (i >= 0) & (ts < hi[np.clip(i, 0, None)])
        return np.where(ok, st[np.clip(i, 0, None)], -2)
    return step_of


def _bwd_starts(ev: pd.DataFrame, names: pd.Series, step: int, step_of) -> np.ndarray:
    t = ev["ts_us"].to_numpy()[str_mask(names, lambda c: c.str.startswith(kineto.BACKWARD_NODE))]
    return t[step_of(t) == step]


def _transitions(fwd_ts: np.ndarray, bwd_ts: np.ndarray) -> int | None:
    """Forward → backward transitions in time order: one per forward pass."""
    if not len(fwd_ts) or not len(bwd_ts):
        return None
    kinds = np.concatenate([np.zeros(len(fwd_ts), int), np.ones(len(bwd_ts), int)])
    order = np.argsort(np.concatenate([fwd_ts, bwd_ts]), kind="stable")
    k = kinds[order]
    return int(((k[:-1] == 0) & (k[1:] == 1)).sum())


def _weight(name: str, dims) -> tuple[int, int] | None:
    """``(in, out)`` of a forward GEMM's weight (``W.t()`` as the op sees it)."""
    if not dims:
        return None
    try:
        w = dims[2] if name == "aten::addmm" else dims[1]
    except IndexError:
        return None
    if name == "aten::convolution" or len(w) != 2:
        return None
    return int(w[0]), int(w[1])


def _recompute(ops: pd.DataFrame, steps: list[int], layers: int | None, token_table, hidden) -> dict:
    """``recompute`` and ``recompute_fraction``: forward compute re-run inside backward spans."""
    if ops.empty or "forward" not in ops or not ops["forward"].any():
        return {}
    fwd = ops[ops["forward"] & ops["step"].isin(steps)]
    if not (fwd["in_bwd"]).any() and not (~fwd["in_bwd"]).any():
        return {}
    outside, inside = fwd[~fwd["in_bwd"]], fwd[fwd["in_bwd"]]
    if outside["flops"].sum() <= 0:
        return {}
    # the output head runs outside the checkpointed blocks: the blocks' forward is the rest
    head = 0.0
    if token_table is not None:
        v = token_table[0]
        is_head = [(_weight(n, d) or (0, 0))[1] == v for n, d in zip(outside["name"], outside["dims"])]
        head = float(outside["flops"][is_head].sum())
    blocks = float(outside["flops"].sum()) - head
    frac = float(inside["flops"].sum()) / float(outside["flops"].sum())
    frac_blocks = float(inside["flops"].sum()) / blocks if blocks > 0 else frac
    att_out = int(outside["name"].isin(_FWD_ATTENTION).sum())
    att_in = int(inside["name"].isin(_FWD_ATTENTION).sum())
    n = len(steps)
    src = (f"{frac:.0%} of the forward FLOPs re-ran inside backward nodes ({frac_blocks:.0%} of the blocks' GEMMs); "
           f"{att_in / n:g} of {att_out / n:g} attention forwards per step")
    if frac < RECOMPUTE_MIN and att_in == 0:
        kind = "none"
        src = "no forward compute re-ran inside backward nodes"
    elif frac_blocks >= FULL_MIN and att_in >= att_out:
        kind = "full"
    else:
        kind = "selective"
    return {"recompute": field(kind, src), "recompute_fraction": field(round(frac, 4), src)}


def _optimizer(ev: pd.DataFrame, names: pd.Series) -> dict | None:
    opt = ev[str_mask(names, lambda c: c.str.match(_OPTIMIZER.pattern))]
    if opt.empty:
        return None
    kinds = Counter(_OPTIMIZER.match(str(n)).group(1) for n in opt["name"])
    wrappers = {"ZeroRedundancyOptimizer", "LightningOptimizer", "AcceleratedOptimizer"}
    inner = [k for k in kinds if k not in wrappers] or list(kinds)
    kind = inner[0]
    cats = pd.Series(names.cat.categories.astype(str)) if isinstance(names.dtype, pd.CategoricalDtype) else pd.Series(names.unique().astype(str))
    fused = sorted(c for c in cats if _FUSED_STEP.match(c))
    foreach = any(c.startswith("aten::_foreach_") for c in cats)
    how = (f"fused ({fused[0]})" if fused else "foreach (aten::_foreach_* ops)" if foreach
           else "per-parameter loop (no fused or foreach ops)")
    if kind.endswith("Container") or kind in wrappers:
        # a container of optimizers (torchtitan's OptimizersContainer) or a wrapper names no
        # algorithm: the fused step it ran does (aten::_fused_adamw_ -> adamw)
        algo = next((m.group(1) for c in fused if (m := re.match(r"aten::_fused_(\w+?)_$", c))), None)
        if algo:
            return field(algo, f"Optimizer.step#{kind}.step annotation around {fused[0]}; fused")
        return field(kind.lower(), f"Optimizer.step#{kind}.step annotation (a container: its optimizer is not named); {how}",
                     "low")
    return field(kind.lower(), f"Optimizer.step#{kind}.step annotation; {how}")


def _layout_evidence(trace: Trace, ev, names, ops, bwd: _Spans, steps, step_of, n_mb) -> dict[str, Any]:
    """What this rank's trace says about the parallel layout (merged by :func:`run_model`)."""
    dist = trace.distributed or {}
    out: dict[str, Any] = {"world_size": dist.get("world_size") or trace.world_size, "rank": dist.get("rank"), "mesh": {}}
    for pg in dist.get("pg_config") or []:
        desc = str(pg.get("pg_desc") or "")
        m = _MESH.match(desc)
        dim = m.group(1) if m else _GROUP_DESC.get(desc)
        if dim and pg.get("pg_size"):
            out["mesh"][dim] = int(pg["pg_size"])
    cats = pd.Series(names.cat.categories.astype(str)) if isinstance(names.dtype, pd.CategoricalDtype) else pd.Series(names.unique().astype(str))
    out["ddp"] = bool((cats == _DDP).any())
    out["fsdp"] = bool(cats.str.startswith(kineto.FSDP_PREFIX).any() or cats.str.startswith("FullyShardedDataParallel").any())
    out["zero1"] = bool(cats.str.contains("ZeroRedundancyOptimizer").any())
    ag = ev[str_mask(names, lambda c: c.str.match(_FSDP_AG.pattern))]
    if len(ag) and steps:
        first = ag[step_of(ag["ts_us"].to_numpy()) == steps[0]]
        per_module = Counter(str(n) for n in first["name"])
        out["fsdp_gathers_per_pass"] = max(per_module.values()) / max(n_mb or 1, 1) if per_module else None
    out["pipeline"] = bool(cats.str.match(kineto.PP_ACTION.pattern).any())
    p2p = cats[cats.str.match(kineto.P2P_OP.pattern)]
    out["p2p"] = bool(len(p2p))
    # tensor parallelism: collectives issued during forward, outside FSDP's own and DDP's
    comms = trace.comms
    tp_calls = 0
    if comms is not None and not comms.empty and steps:
        c = comms[~comms["is_gpu"]]
        c = c[c["name"].astype(str).str.match(kineto.ISSUED_COLLECTIVE.pattern) | (c["name"].astype(str) == kineto.RECORD_PARAM_COMMS)]
        c = c[c["collective"].map(kineto.normalise_op).isin(_TP_OPS)]
        if not c.empty:
            fsdp = _Spans(ev, str_mask(names, lambda x: x.str.startswith(kineto.FSDP_PREFIX) | x.str.startswith("Optimizer.")))
            t, tid = c["ts_us"].to_numpy(), c["tid"].astype(str).to_numpy(dtype=object)
            fwd = ~bwd.inside(tid, t) & ~fsdp.inside(tid, t) & (step_of(t) == steps[0])
            # forward lies between the step's first forward op and its first backward node
            f_ops = ops[(ops["step"] == steps[0]) & ~ops["in_bwd"]]
            b_start = _bwd_starts(ev, names, steps[0], step_of)
            if len(f_ops) and len(b_start):
                fwd &= (t >= float(f_ops["ts_us"].min())) & (t < float(b_start.min()))
                tp_calls = int(fwd.sum())
                sizes = c["group_size"][fwd].dropna()
                if len(sizes):
                    out["tp_group_size"] = int(sizes.mode().iloc[0])
    out["forward_collectives"] = tp_calls
    return out


def value(model: dict | None, name: str) -> Any:
    """``model.fields[name].value``, or None."""
    return ((model or {}).get("fields") or {}).get(name, {}).get("value")
