"""A ``workbench plan --json`` document read back (``workbench compare RUN PLAN.json``), checked
before anything reads it: size and nesting bounded, the keys and types of ``workbench.plan/1``
that the comparison uses, and that the plan is for the run's job (same model, same GPU kind and
count, a GPU or a CPU run as planned).

A hand-edited or truncated plan is one line naming the first bad key (``plans[0].time.step_ms
must be a number, got 'x'``), never a traceback. Beyond types, the figures a comparison takes as
given must be physically possible: the schema is the one this release writes, the GPU one the
device table knows, MFU and HFU fractions of at most 1, and the model's FLOPs per token no more
than :data:`FLOPS_PER_TOKEN_SLACK` × what its shape gives (6·N + 12·L·h·s).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from workbench.format.errors import WorkbenchError

MAX_PLAN_BYTES = 64 << 20
"""A plan of thousands of layouts is a few MB; a larger file is not one."""
MAX_DEPTH = 32
"""``workbench.plan/1`` nests 5 deep; json.loads recurses once per level and dies near 1,000."""
PARAMS_TOLERANCE = 0.25
"""A plan's parameter count this far from the run's is another model."""
SCHEMA = "workbench.plan/1"
"""The plan schema this release reads (and writes: workbench.plan.report.JSON_SCHEMA)."""
MAX_NUMBER = 1e18
"""No figure of a plan comes near (parameters ~1e12, tokens/s ~1e9, FLOPs per token ~1e13); past
it a number is a typo or an attack, and a JSON integer of any length fits Python but not a float."""
FLOPS_PER_TOKEN_SLACK = 2.0
"""A plan's model_flops_per_token may exceed 6·N + 12·L·h·s (the convention it is written in) by
this factor (an MoE's or a variant's conventions differ by tens of per cent, never 2×)."""

_MISSING = object()
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")
_SCHEMA = re.compile(r'"json_schema"\s*:\s*"workbench\.plan/')


def nesting_depth(text: str) -> int:
    """The deepest bracket nesting of JSON ``text`` (strings skipped), without recursion."""
    depth = deepest = 0
    for m in _BRACKET.finditer(_STRING.sub('""', text)):
        depth += 1 if m.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def looks_like_plan(path: str | Path) -> bool:
    """Whether ``path`` is a file that says it is a plan (schema workbench.plan/…), read cheaply:
    a plan that then fails its checks gets their error, not "not a run"."""
    p = Path(path)
    if p.suffix != ".json" or not p.is_file():
        return False
    try:
        with p.open("rb") as f:
            head = f.read(1 << 16).decode("utf-8", "replace")
    except OSError:
        return False
    return bool(_SCHEMA.search(head))


def read_plan(path: str | Path) -> dict:
    """The plan document at ``path``, checked (:func:`check_plan`)."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_PLAN_BYTES:
            raise WorkbenchError(f"{p}: {p.stat().st_size / 2**20:,.0f} MiB is not a plan (workbench plan --json "
                                 f"writes a few MB at most)")
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise WorkbenchError(f"{p}: not UTF-8 text, so not a workbench plan --json document") from None
    except OSError as e:
        raise WorkbenchError(f"{p}: cannot read the plan ({e.strerror or e})") from None
    depth = nesting_depth(text)
    if depth > MAX_DEPTH:
        raise WorkbenchError(f"{p}: JSON nested {depth:,} deep, not a workbench.plan/1 document (at most {MAX_DEPTH})")
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except ValueError as e:
        raise WorkbenchError(f"{p}: not valid JSON ({e}); write it with workbench plan … --json") from None
    check_plan(doc, p)
    return doc


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def check_plan(doc: object, where: object = "the plan") -> None:
    """Raise WorkbenchError naming the first key of ``doc`` that ``workbench.plan/1`` (as the
    comparison reads it) does not allow."""
    def bad(key: str, want: str, got: object) -> WorkbenchError:
        shown = "nothing (the key is missing)" if got is _MISSING else (
            repr(got) if len(repr(got)) <= 40 else f"a {type(got).__name__}")
        return WorkbenchError(f"{where}: not a valid workbench.plan/1 document: {key} must be {want}, got {shown} "
                              "(write it with workbench plan … --json)")

    def obj(d: dict, key: str, path: str, *, null: bool = False) -> dict | None:
        v = d.get(key, _MISSING)
        if v is None and null:
            return None
        if not isinstance(v, dict):
            raise bad(path, "an object" + (" or null" if null else ""), v)
        return v

    def num(d: dict, key: str, path: str, *, null: bool = False) -> None:
        v = d.get(key, _MISSING)
        if v is None and null:
            return
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not _finite(v) or v < 0:
            raise bad(path, "a number ≥ 0" + (" or null" if null else ""), v)
        if v > MAX_NUMBER:
            raise bad(path, f"a number ≤ {MAX_NUMBER:g}", v)

    def fraction(d: dict, key: str, path: str) -> None:
        v = d.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 1:
            raise WorkbenchError(f"{where}: {path} is {v:g}, a fraction of the GPU's peak above 1: no plan predicts more "
                                 "than the peak (write it with workbench plan … --json)")

    def text(d: dict, key: str, path: str, *, null: bool = False) -> None:
        v = d.get(key, _MISSING)
        if v is None and null:
            return
        if not isinstance(v, str):
            raise bad(path, "a string" + (" or null" if null else ""), v)

    if not isinstance(doc, dict):
        raise bad("the document", "an object", doc)
    schema = doc.get("json_schema")
    if not (isinstance(schema, str) and schema.startswith("workbench.plan/")):
        raise bad("json_schema", "'workbench.plan/1'", schema)
    if schema != SCHEMA:
        raise WorkbenchError(f"{where}: schema {schema[:40]!r}: this workbench reads {SCHEMA!r} plans (a plan "
                             "written by another release: make it again with this one's workbench plan … --json)")
    plans = doc.get("plans")
    if not isinstance(plans, list):
        raise bad("plans", "a list", plans)
    for i, p in enumerate(plans):
        if not isinstance(p, dict):
            raise bad(f"plans[{i}]", "an object", p)
    model = obj(doc, "model", "model")
    text(model, "name", "model.name")
    for k in ("layers", "hidden", "params", "model_flops_per_token"):
        num(model, k, f"model.{k}")
    _flops_per_token_bound(model, where)
    cluster = obj(doc, "cluster", "cluster")
    text(cluster, "gpu", "cluster.gpu")
    num(cluster, "gpus", "cluster.gpus")
    _known_gpu(cluster["gpu"], where)
    text(obj(doc, "efficiencies", "efficiencies"), "source", "efficiencies.source")
    if "from_run" in doc and doc["from_run"] is not None:
        fr = obj(doc, "from_run", "from_run", null=True)
        text(fr, "name", "from_run.name")
        text(fr, "device", "from_run.device")
    if not plans:
        return
    first = plans[0]
    text(first, "layout_key", "plans[0].layout_key")
    text(first, "problem", "plans[0].problem", null=True)
    mem = obj(first, "memory", "plans[0].memory")
    for k in ("total_gib", "transient_gib"):
        num(mem, k, f"plans[0].memory.{k}")
    t = obj(first, "time", "plans[0].time", null=True)
    if t is not None:
        for k in ("step_ms", "tokens_per_s", "mfu", "tp_comm_ms", "pp_comm_ms", "dp_exposed_ms"):
            num(t, k, f"plans[0].time.{k}")
        for k in ("mfu", "hfu"):
            fraction(t, k, f"plans[0].time.{k}")
        if not t["step_ms"] > 0:
            raise bad("plans[0].time.step_ms", "above 0", t["step_ms"])
    colls = first.get("collectives", [])
    if not isinstance(colls, list):
        raise bad("plans[0].collectives", "a list", colls)
    for i, c in enumerate(colls):
        if not isinstance(c, dict):
            raise bad(f"plans[0].collectives[{i}]", "an object", c)
        num(c, "bytes_per_step", f"plans[0].collectives[{i}].bytes_per_step")


def _finite(v: int | float) -> bool:
    """A JSON number a float holds (an integer of 400 digits does not: float() raises)."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _flops_per_token_bound(model: dict, where: object) -> None:
    """model_flops_per_token within :data:`FLOPS_PER_TOKEN_SLACK` × 6·N + 12·L·h·s of the model's shape."""
    seq = model.get("seq")
    seq = seq if isinstance(seq, (int, float)) and not isinstance(seq, bool) and 0 < seq <= MAX_NUMBER else 0
    shape = 6 * model["params"] + 12 * model["layers"] * model["hidden"] * seq
    fpt = model["model_flops_per_token"]
    if shape > 0 and fpt > FLOPS_PER_TOKEN_SLACK * shape:
        raise WorkbenchError(f"{where}: model.model_flops_per_token {fpt:.3g} is {fpt / shape:.3g}× what the model's shape "
                             f"gives (6·N + 12·L·h·s = {shape:.3g}): not this model's FLOPs (write it with workbench plan … --json)")


def _known_gpu(name: str, where: object) -> None:
    """The plan's GPU is one the device table knows (the comparison takes its peak)."""
    from workbench.hardware.systems import gpu_spec

    try:
        gpu_spec(name)
    except WorkbenchError as e:
        raise WorkbenchError(f"{where}: cluster.gpu: {e}") from None


def job_mismatches(plan_doc: dict, run: dict, run_shape: dict | None) -> list[str]:
    """How the plan's job differs from the run's: model, device class (GPU/CPU), GPU kind and
    count. ``run``: the run's ``name``, ``world_size``, ``has_gpu`` and ``device`` (its analysed
    result's); ``run_shape``: its ``layers``, ``hidden``, ``params`` where known (its engine
    config, or the model the analysis inferred). Empty: the plan is for this run."""
    from workbench.hardware.devices import resolve

    out: list[str] = []
    m, c = plan_doc["model"], plan_doc["cluster"]
    if run_shape:
        if run_shape.get("layers") and run_shape.get("hidden"):
            if (int(m["layers"]), int(m["hidden"])) != (int(run_shape["layers"]), int(run_shape["hidden"])):
                out.append(f"the model: the plan's {m['name']} has {m['layers']} layers of {m['hidden']}, "
                           f"the run's {run_shape['layers']} of {run_shape['hidden']}")
        elif run_shape.get("params") and m["params"]:
            ratio = m["params"] / run_shape["params"]
            if abs(ratio - 1) > PARAMS_TOLERANCE:
                out.append(f"the model: the plan's {m['name']} has {m['params'] / 1e9:.3g}B parameters, "
                           f"the run's {run_shape['params'] / 1e9:.3g}B")
    world = int(run.get("world_size") or 1)
    if int(c["gpus"]) != world:
        out.append(f"the GPU count: the plan is for {int(c['gpus']):,}, the run had {world:,} rank{'s' * (world != 1)}")
    if not run.get("has_gpu"):
        fr = plan_doc.get("from_run") or {}
        if not (fr.get("name") == run.get("name") and fr.get("device") == "cpu"):
            out.append(f"the device class: the plan is for {c['gpu']} GPUs, the run ran on CPUs (a plan made "
                       "with --from-run of this run holds its memory and communication against a GPU)")
    else:
        a, b = resolve(c["gpu"]), resolve(run.get("device"))
        if a is not None and b is not None and a.gpu.key != b.gpu.key:
            out.append(f"the GPU: the plan is for {c['gpu']}, the run ran on {run.get('device')}")
    return out
