"""``workbench plan --from-run RUN`` for any run: what ran, as the planner's inputs, and the plan
of it held beside what it measured.

Where the inputs come from:

- an engine run (``workbench train``): its manifest's config, exactly (:mod:`.engine_runs`);
- any other run: the model the analysis inferred from its traces (``workbench analyze --json``'s
  ``model`` block: its shape, a mixture of experts' and latent attention's, micro-batch(es), dtype,
  the parallel layout with its ep, the optimizer; the recomputation its trainer's configuration
  states, else the one the traces show), the GPUs from the run, the torch stack (DDP + autocast, or
  FSDP2); the trainer's recomputation modes are the ones searched. ``MODEL`` given beside ``--from-run``
  replaces the inferred model (a run whose model cannot be inferred: a non-transformer, a trace
  recorded without shapes).

:func:`run_model` is the adapter from the analysis' block to the planner; :func:`from_run_json`
adds to a plan of the run the measured step (``summary.step_ms``: the job's step) and peak
memory (the allocator's) beside the predicted ones, and the best layouts on the run's GPU count
and on 2×, 4×, 8× the GPUs, with the same global batch and the same calibration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from workbench.format.errors import WorkbenchError
from workbench.plan.layout import Layout, Stack, torch_stack
from workbench.calibration.measured import data_wait_ms, job_step_ms, measured_of, peak_allocated_bytes
from workbench.plan.model import ModelSpec
from workbench.pipeline.result import Result

REQUIRED = ("layers", "hidden", "heads", "vocab", "seq")
"""Fields without which there is no transformer to plan (the rest have defaults)."""
MIN_SPEEDUP = 1.03
"""Less than this per GPU is no gain on the run's GPUs (the planner's median error on the engine's
H200 runs is about 4 %)."""
SCALES = (1, 2, 4, 8)
"""GPU counts the alternatives are searched on, as multiples of the run's."""
DTYPES = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "tf32": "tf32", "fp64": "fp32", "fp8": "bf16"}
"""The analysis' dtype names → the planner's (fp8 matmuls are planned at bf16 rates: the planner
has no fp8 model; fp64 at fp32's)."""
OPTIMIZER_STATE_BYTES = {"adamw": 8, "adam": 8, "lion": 4, "sgd": 4, "adafactor": 4}
"""fp32 state per parameter: Adam's two moments, Lion's and SGD-momentum's one, Adafactor's
factored second moment (about one)."""


def inferred_fields(result: Result) -> dict:
    """``{name: value}`` of the analysis' inferred model (``result.model.fields``), the fields
    with a value only; {} when the analysis inferred none."""
    return {k: f["value"] for k, f in result.model.fields.items() if isinstance(f, dict) and f.get("value") is not None}


@dataclass(kw_only=True, slots=True, frozen=True)
class RunJob:
    """What a run ran, as the planner's inputs, and what it measured."""

    name: str
    path: str
    model: ModelSpec
    layout: Layout
    global_batch: int
    """Sequences per optimizer step, all replicas."""
    stack: Stack
    dtype: str
    gpus: int
    device: str
    """cuda | cpu."""
    device_name: str | None
    """The GPU's name as the run recorded it; None on CPU."""
    measured_step_ms: float | None
    """The job's step (``summary.step_ms``)."""
    measured_peak_bytes: float | None
    """The allocator's peak allocated bytes on the rank that peaked."""
    data_wait_ms: float = 0.0
    """Of the measured step, the time the loop waited on its data loader (the planner assumes none)."""
    taken: dict = field(default_factory=dict)
    """The inferred fields used: ``{name: {value, source, confidence}}``."""
    assumed: tuple[str, ...] = ()
    """What the traces did not say and was assumed, one line each."""
    source: str = "traces"
    """manifest (an engine run's config) | traces (the inferred model) | MODEL (given, the rest inferred)."""
    trainer: str | None = None
    """The trainer the analysis recognised (``model.trainer.name``: torchtitan, hf_trainer …), else None."""
    result: Result | None = field(default=None, repr=False, compare=False)
    """The run's analysed result, when it was read (GPU runs)."""

    @property
    def world(self) -> int:
        """Ranks (as :class:`~workbench.plan.engine_runs.EngineCase` names it: calibration reads either)."""
        return self.gpus

    def describe(self) -> dict:
        """The plan document's ``from_run`` block (before the prediction is added)."""
        return {"path": self.path, "name": self.name, "device": self.device, "source": self.source,
                "measured": {"step_ms": None if self.measured_step_ms is None else round(self.measured_step_ms, 3),
                             "peak_memory_gib": None if self.measured_peak_bytes is None
                             else round(self.measured_peak_bytes / 2**30, 3),
                             "data_wait_ms": round(self.data_wait_ms, 3)},
                "inferred": self.taken, "assumed": list(self.assumed)}


def run_job(run: str | Path, *, model: str | None = None, global_batch: int | None = None,
            result: Result | None = None) -> RunJob:
    """What ``run`` ran: an engine run's manifest config exactly, else the model its analysis
    inferred (``model``: a MODEL argument that replaces the inferred shape). ``result``: the run's
    analysis when the caller has it (else :func:`analysis_of`)."""
    from workbench.plan.engine_runs import engine_case, read_manifest
    from workbench.plan.presets import model_spec

    p = Path(run)
    if not p.exists():
        raise WorkbenchError(f"--from-run {run}: no such run directory or trace")
    man = read_manifest(p) if (p / "manifest.json").exists() else {}
    cfg = man.get("config") if isinstance(man.get("config"), dict) else {}
    if "model" in cfg and "parallel" in cfg:
        case = engine_case(p, man)
        result = (result or analysis_of(p)) if case.device == "cuda" else None
        step, peak = measured_of(result, p) if result else (None, None)
        return RunJob(name=case.name, path=str(run), model=case.model, layout=case.layout,
                      global_batch=case.global_batch, stack=case.stack, dtype=case.stack.dtype, gpus=case.world,
                      device=case.device, device_name=case.device_name, measured_step_ms=step,
                      measured_peak_bytes=peak, data_wait_ms=data_wait_ms(result) if result else 0.0, source="manifest",
                      result=result)
    result = result or analysis_of(p)
    job = run_model(result, name=p.name, model=model_spec(model) if model else None, global_batch=global_batch)
    step, peak = measured_of(result, p)
    return replace(job, path=str(run), measured_step_ms=step, measured_peak_bytes=peak, data_wait_ms=data_wait_ms(result),
                   source="MODEL" if model else "traces", result=result)


def _int(fields: dict, name: str) -> int | None:
    v = fields.get(name)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v) or v < 1:
        return None
    return int(v)


SHAPE_FIELDS = ("layers", "hidden", "heads", "vocab", "seq", "ffn", "kv_heads", "head_dim", "v_head_dim", "experts",
                "top_k", "shared_experts", "shared_ffn", "moe_ffn", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim")
"""Whole-number fields of the analysis' model block the planner's ModelSpec takes as they are."""
LATENT_ROPE_DIM = 64
"""Latent attention's rotary part of the head when the traces do not show it (the model block's
``qk_rope_head_dim``): DeepSeek-V2/V3's."""


def _moe_shape(f: dict, shape: dict, assumed: list[str]) -> None:
    """A mixture of experts' fields on ``shape`` (in place): the dense blocks (``dense_layers`` or
    ``layers − moe_layers``) taken to come first, as DeepSeek's do; latent attention's rotary part."""
    if shape.get("experts"):
        dense = f.get("dense_layers")
        if not isinstance(dense, int) or isinstance(dense, bool):
            moe = _int(f, "moe_layers")
            dense = shape["layers"] - moe if moe is not None and moe <= shape["layers"] else 0
        if dense:
            assumed.append(f"the {dense} dense block{'s' * (dense != 1)} come{'s' * (dense == 1)} first "
                           "(DeepSeek's first_k_dense)")
        shape["dense_layers"] = max(0, min(dense, shape["layers"] - 1))
        if "ffn" not in shape and shape["dense_layers"]:
            assumed.append("the dense blocks' MLP width not inferred: 4h")
        shape.setdefault("shared_experts", int(f.get("shared_experts") or 0))
    else:
        for k in ("top_k", "shared_experts", "shared_ffn", "moe_ffn"):
            shape.pop(k, None)
    if shape.get("kv_lora_rank") or f.get("attention") == "MLA":
        if not shape.get("kv_lora_rank"):
            shape["kv_lora_rank"] = 512
            assumed.append("latent attention's compressed width not inferred: 512 (DeepSeek-V2/V3)")
        if not shape.get("qk_rope_head_dim"):
            shape["qk_rope_head_dim"] = LATENT_ROPE_DIM
            assumed.append(f"latent attention's rotary head part {LATENT_ROPE_DIM} (DeepSeek-V2/V3; not in the traces)")
        shape.pop("kv_heads", None)


def _closest_shape(f: dict, params_total: int | None) -> tuple[dict, str]:
    """learned_pos, bias and norm: the combination whose parameter count is nearest the run's (the
    traces count parameters, not which small tensors make them up)."""
    base = dict(f)
    gpt, llama = dict(learned_pos=True, bias=True, norm="layernorm"), dict(learned_pos=False, bias=False, norm="rms")
    if not params_total:
        # no count to match: GPT's conventions for a plain MLP, Llama's for a gated one
        return (llama if base.get("gated") else gpt), "assumed from the MLP (no parameter count to match)"
    best, err = gpt, math.inf
    for pos in (True, False):
        for bias in (True, False):
            for norm in ("layernorm", "rms"):
                extra = dict(learned_pos=pos, bias=bias, norm=norm)
                try:
                    n = ModelSpec(name="x", **base, **extra).params()
                except WorkbenchError:
                    continue
                if abs(n - params_total) < err:
                    best, err = extra, abs(n - params_total)
    return best, f"the nearest to the run's {params_total:,} parameters ({100 * err / params_total:.2f} % off)"


def run_model(result: Result, *, name: str = "the run", model: ModelSpec | None = None,
              global_batch: int | None = None) -> RunJob:
    """The planner's view of a run from its analysed result: model, layout, batch, recomputation,
    dtype and stack from ``result.model``, GPU and GPU count from ``result.run``. ``model`` (the
    MODEL argument) replaces the inferred shape; ``global_batch`` (``--global-batch``) the inferred
    batch. WorkbenchError naming the missing fields otherwise."""
    full = result.model.fields
    f = inferred_fields(result)
    kind = result.model.kind
    run = result.run
    assumed: list[str] = []
    taken: dict = {}
    if model is None:
        missing = [k for k in REQUIRED if _int(f, k) is None]
        if missing or kind not in (None, "transformer"):
            what = (f"its traces show {'a convnet' if kind == 'convnet' else 'a model'} that is not a transformer "
                    f"(kind {kind!r})" if kind not in (None, "transformer")
                    else "its model could not be inferred from the traces" if not f
                    else f"its traces do not say the model's {', '.join(missing)}")
            # the block exists but is empty: the traces hold no shapes to infer from
            hint = " (record the trace with record_shapes=True)" if not f else ""
            raise WorkbenchError(f"{name}: {what}{hint}; give the model as MODEL: "
                                 f"workbench plan L=…,h=…,a=…,V=…,s=…[,ffn=…,kv=…,gated=1] --from-run {run.path or 'RUN'}")
        shape = {k: _int(f, k) for k in SHAPE_FIELDS}
        shape = {k: v for k, v in shape.items() if v is not None}
        shape.update({k: bool(f[k]) for k in ("gated", "tied", "qk_norm") if isinstance(f.get(k), bool)})
        if shape.get("experts") and "moe_ffn" not in shape and "ffn" in shape and not (
                _int(f, "dense_layers") or (_int(f, "moe_layers") or shape["layers"]) < shape["layers"]):
            shape["moe_ffn"] = shape.pop("ffn")  # every block a mixture: the width the traces show is the experts'
        _moe_shape(f, shape, assumed)
        try:
            extra, how = _closest_shape(shape, _int(f, "params_total"))
            model = ModelSpec(name=f"inferred:{name}", **shape, **extra)
        except WorkbenchError as e:
            raise WorkbenchError(f"{name}: the model its traces show cannot be planned ({str(e).split(': ', 1)[-1]}); "
                                 f"give it as MODEL: workbench plan L=…,h=…,a=…,V=…,s=… --from-run "
                                 f"{run.path or 'RUN'}") from None
        taken.update({k: full[k] for k in (*REQUIRED, *SHAPE_FIELDS, "gated", "tied", "qk_norm", "dense_layers", "moe_layers",
                                           "attention", "params_total", "params_active") if k in full})
        norms = "weight and bias" if extra["norm"] == "layernorm" else "weight only"
        assumed.insert(0, f"position table {'learned' if extra['learned_pos'] else 'none (rotary)'}, "
                          f"biases {'yes' if extra['bias'] else 'no'}, norms with {norms}: {how}")
        active = _int(f, "params_active")
        if active and model.moe and abs(model.params_active() / active - 1) > 0.05:
            assumed.append(f"active parameters: the run's {active:,}, the planner's {model.params_active():,} "
                           f"({100 * (model.params_active() / active - 1):+.1f} %)")
    world = int(run.world_size or 1)
    lay = f.get("layout") if isinstance(f.get("layout"), dict) else {}
    tp, pp, ep = (_int(lay, k) or 1 for k in ("tp", "pp", "ep"))
    if world % (tp * pp):
        assumed.append(f"the inferred tp {tp} x pp {pp} does not divide the {world} ranks: tp = pp = 1")
        tp = pp = 1
    dp = world // (tp * pp)
    if ep > 1 and (not model.moe or model.experts % ep or (dp * tp) % ep):
        assumed.append(f"the inferred ep {ep} does not divide the experts and dp x tp = {dp * tp}: ep = 1")
        ep = 1
    zero = lay.get("zero") if isinstance(lay.get("zero"), int) and not isinstance(lay.get("zero"), bool) else None
    fsdp = bool(lay.get("fsdp"))
    if zero not in (0, 1, 2, 3):
        zero = 3 if fsdp else 0
    if "layout" in full:
        taken["layout"] = full["layout"]
    else:
        assumed.append(f"layout not inferred: data parallel over the {world} rank{'s' * (world != 1)}, no ZeRO")
    trainer = result.model.extra.get("trainer") if isinstance(result.model.extra.get("trainer"), dict) else {}
    if (rc := _recompute(trainer.get("settings") if isinstance(trainer.get("settings"), dict) else {})) is not None:
        taken["recompute"] = {"value": rc, "confidence": "high",  # the trainer's own configuration says it
                              "source": f"{trainer.get('title') or trainer.get('name')}'s configuration ({trainer.get('source')})"}
    elif (rc := _recompute(f)) is None:
        assumed.append("recomputation not inferred: none")
    else:
        taken["recompute"] = full["recompute_mode" if "recompute_mode" in full else "recompute"]
    mb, mbs = _int(f, "micro_batch"), _int(f, "micro_batches")
    if mb is not None:
        taken["micro_batch"] = full["micro_batch"]
    if mbs is not None:
        taken["micro_batches"] = full["micro_batches"]
    if global_batch is None:
        if mb is None:
            raise WorkbenchError(f"{name}: its traces do not say the micro-batch (the embedding's input shape); "
                                 "give --global-batch B (sequences per optimizer step) and --layout mb=…")
        if mbs is None:
            assumed.append("micro-batches per step not inferred: 1 (no gradient accumulation)")
        global_batch = mb * (mbs or 1) * dp
    if mb is None or global_batch % (dp * mb):
        # --global-batch given: one micro-batch per replica and step unless the inferred one divides it
        mb = max(1, global_batch // dp)
    dtype = DTYPES.get(str(f.get("dtype")), None)
    if dtype is None:
        dtype = "bf16" if run.has_gpu else "fp32"
        assumed.append(f"dtype not inferred: {dtype}")
    else:
        taken["dtype"] = full["dtype"]
    # the optimizer's name, or (a container such as torchtitan's OptimizersContainer) what ran inside it
    opt_text = f"{f.get('optimizer') or ''} {(full.get('optimizer') or {}).get('source', '')}".lower()
    opt = next((k for k in OPTIMIZER_STATE_BYTES if k in opt_text), None)
    if opt is not None:
        taken["optimizer"] = full["optimizer"]
    else:
        assumed.append("optimizer not inferred: AdamW (8 bytes of state per parameter)")
    layout = Layout(tp=tp, pp=pp, dp=dp, zero=zero, mb=mb, recompute=rc or "none", ep=ep)
    # FSDP2 (ZeRO 2/3) casts inside the blocks (bf16 activations); DDP runs under autocast and keeps
    # its gradient buckets beside .grad — a single-GPU loop without DDP (torchtitan on one GPU) does not
    ddp = dp > 1 or "distributeddataparallel" in str((full.get("layout") or {}).get("source", "")).lower()
    stack = torch_stack(dtype, zero=zero, optimizer_bytes=OPTIMIZER_STATE_BYTES.get(opt or "adamw", 8), pipeline=pp > 1)
    if zero <= 1 and not ddp:
        stack = replace(stack, ddp_bucket_copy=False)
        assumed.append("no DistributedDataParallel in the traces: no gradient buckets beside .grad")
    gpu = bool(run.has_gpu)
    return RunJob(name=name, path=str(run.path or name), model=model, layout=layout, global_batch=global_batch,
                  stack=stack, dtype=dtype, gpus=world, device="cuda" if gpu else "cpu",
                  device_name=run.device if gpu else None, measured_step_ms=job_step_ms(result),
                  measured_peak_bytes=peak_allocated_bytes(result), taken=taken, assumed=tuple(assumed),
                  trainer=trainer.get("name") if isinstance(trainer.get("name"), str) else None)


def _recompute(f: dict) -> str | None:
    """The run's recomputation in the planner's words: the mode the analysis read (``recompute_mode``:
    torchtitan's op-level, a layer frequency, Korthikanti's, full), else its kind (a partial one it
    could not tell apart is planned as Korthikanti's ``selective``); None when not inferred."""
    from workbench.plan.recompute import parse_recompute

    for key in ("recompute_mode", "recompute"):
        v = f.get(key)
        if isinstance(v, str):
            try:
                return parse_recompute(v)
            except WorkbenchError:
                continue
    return None


def analysis_of(run: str | Path) -> Result:
    """The run's analysed result (workbench.pipeline.analyze: the cached one when nothing changed)."""
    from workbench.pipeline import analyze

    return analyze(run).result


def _pct(pred: float | None, meas: float | None) -> float | None:
    return None if not (pred and meas) else round(100 * (pred / meas - 1), 2)


def from_run_json(req, result) -> dict:
    """``req.from_run`` (what the run is) with, for a GPU run, the plan of the run's own layout
    beside what it measured and the best layouts on 1, 2, 4 and 8 times its GPUs."""
    from workbench.hardware.systems import make_cluster
    from workbench.plan.search import plan

    out = dict(req.from_run)
    job = req.run_job
    given = result.given
    if job is not None and not (given is not None and given.layout == job.layout and req.cluster.gpus == job.gpus
                                and req.global_batch == job.global_batch):
        # the request asks another GPU count, batch or layout: the run is still predicted as it ran,
        # on its own GPUs, and the alternatives are measured from there
        c = req.cluster
        own = make_cluster(c.gpu.name, job.gpus, min(c.gpus_per_node, job.gpus), c.intra_gbps, c.inter_gbps)
        req = replace(req, cluster=own, global_batch=job.global_batch, layout=job.layout, run_stack=job.stack,
                      from_run=None)
        result = plan(req)
        given = result.given
        out["note"] = (f"the run predicted as it ran ({job.gpus} GPU{'s' * (job.gpus != 1)}, global batch "
                       f"{job.global_batch}), apart from the plan asked for")
    meas = out.get("measured") or {}
    pred_step = given.time.step_s * 1e3 if (given is not None and given.time is not None) else None
    pred_mem = given.memory.total if given is not None else None
    out["predicted"] = {"layout_key": given.layout.key() if given else None,
                        "step_ms": None if pred_step is None else round(pred_step, 2),
                        "memory_gib": None if pred_mem is None else round(pred_mem / 2**30, 3)}
    out["error_pct"] = {"step": _pct(pred_step, meas.get("step_ms")),
                        "memory": _pct(pred_mem and pred_mem / 2**30, meas.get("peak_memory_gib"))}
    alts = []
    if given is not None and pred_step:
        run_rate = req.global_batch / pred_step / req.cluster.gpus
        # anchored on what the run measured, less its wait on data (which no layout changes)
        busy = (meas.get("step_ms") or 0) - (meas.get("data_wait_ms") or 0)
        anchor = busy / pred_step if busy > 0 else None
        c = req.cluster
        for k in SCALES:
            cluster = c if k == 1 else make_cluster(c.gpu.name, c.gpus * k, max(c.gpus_per_node, min(8, c.gpus * k)),
                                                   c.intra_gbps, c.inter_gbps)
            # on the run's own GPUs the plan itself (it holds the run's layout even where the search
            # space does not: a micro-batch of 12, say); elsewhere a search of its own
            sub = result if k == 1 else plan(replace(req, cluster=cluster, layout=None, run_stack=None, from_run=None))
            best = next((e for e in sub.ranked if not (k == 1 and e.layout == given.layout)), None)
            row = {"scale": k, "gpus": cluster.gpus, "searched": sub.searched, "fitting": sub.fitting}
            if best is None:
                row.update(layout_key=None, note="no other layout fits" if k == 1 else "no layout fits")
            else:
                t = best.time
                row.update(layout_key=best.layout.key(), layout=best.layout.to_json(), step_ms=round(t.step_s * 1e3, 2),
                           anchored_step_ms=None if anchor is None else round(t.step_s * 1e3 * anchor, 2),
                           memory_gib=round(best.memory.total / 2**30, 3), tokens_per_s=round(t.tokens_per_s, 1),
                           mfu=round(t.mfu, 4),
                           speedup_per_gpu=round(req.global_batch / (t.step_s * 1e3) / cluster.gpus / run_rate, 3),
                           note=None)
                speedup = row["speedup_per_gpu"]
                if k == 1 and speedup < MIN_SPEEDUP:
                    row["note"] = ("the run's layout is the fastest found" if sub.ranked and sub.ranked[0].layout == given.layout
                                   else f"no layout predicted {100 * (MIN_SPEEDUP - 1):.0f} % faster than the run's")
            alts.append(row)
    out["alternatives"] = alts
    return out
