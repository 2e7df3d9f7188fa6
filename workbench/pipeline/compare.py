"""``workbench compare A B``: did the fix work? Per-metric deltas, diagnoses resolved and new, and
the measured speed-up next to what A's diagnoses estimated.

``Comparison.to_json()`` is the stable ``workbench compare --json`` schema
(``json_schema`` = ``workbench.compare/1``; keys are only ever added)::

    {
      "json_schema": "workbench.compare/1",
      "a": {"path", "name", "verdict"}, "b": {"path", "name", "verdict"},
      "metrics": [{"metric", "a", "b", "delta", "delta_pct"}],   # Result.metrics of both
      "speedup_measured": float|null,   # A step_ms / B step_ms, the job's steps (> 1: B is faster)
      "resolved": [{"id", "severity", "title", "estimated_speedup_max", "within_estimate"}],
                                        # in A at warning or above, absent or info in B
      "new": [{"id", "severity", "title"}],   # in B at warning or above, not so in A
      "persisting": [str],              # ids at warning or above in both
      "mismatches": [str]               # how A and B are not like for like (GPU model, CPU vs GPU, the
                                        # model, the rank count, a partial run): the deltas and the
                                        # speed-up are then not a fix's; [] when they are
    }
Which steps each number covers (workbench.pipeline.verdict's ``metrics``): ``step_ms`` (and
``steady_step_ms``, the same figure) and ``speedup_measured`` the job's step, the mean of the
unprofiled steady steps (step ≥ 1, not profiled: ``workbench.analysis.job``), the throughput the
case studies' RESULTS.md report; the category shares the profiled steps set against it;
``trace_step_ms`` the profiled steps' own. Counting step 0's start-up and the profiled steps would
give 57,306 tokens/s against RESULTS.md's 139,452 for ``traces/case_gpu_2_preload_shm``.
``tokens_per_s`` is the script's own count (``record_metrics(tokens=…)``) where it wrote one, else
the inferred model's tokens per step (workbench.analysis.model) over the steady step; ``mfu_pct``
(the model's FLOPs, the field's MFU) and ``hfu_pct`` (the FLOPs the trace executed) are the job's
step's (verdict's ``efficiency``).
``within_estimate``: the measured speed-up does not exceed the diagnosis's upper bound
(``speedup_max``) by more than ``ESTIMATE_TOLERANCE`` (run-to-run noise); null without a bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workbench.format.words import count
from workbench.pipeline.result import Result

JSON_SCHEMA = "workbench.compare/1"
ALWAYS = ("step_ms", "tokens_per_s", "mfu_pct", "hfu_pct")
"""Metrics every comparison lists (the README's "step, tokens/s, MFU, HFU"), measured or not."""
ESTIMATE_TOLERANCE = 0.05
"""5 %: two profiled runs of the same configuration differ by a few percent in step time."""


@dataclass(slots=True)
class Comparison:
    a: Result
    b: Result
    metrics: Any
    """DataFrame: metric, a, b, delta (b − a), delta_pct (100 × delta / a)."""
    resolved: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    persisting: list[str] = field(default_factory=list)
    speedup_measured: float | None = None
    estimates: dict[str, float | None] = field(default_factory=dict)
    """Resolved id → A's estimated ``speedup_max``."""
    mismatches: list[str] = field(default_factory=list)
    """How A and B differ beyond a change to the job (:func:`mismatches`)."""

    def within_estimate(self, rule_id: str) -> bool | None:
        est = self.estimates.get(rule_id)
        if est is None or self.speedup_measured is None:
            return None
        return bool(self.speedup_measured <= est * (1 + ESTIMATE_TOLERANCE))

    def to_json(self) -> dict[str, Any]:
        def num(v):
            return None if v is None or v != v else round(float(v), 4)

        da = {d.id: d for d in self.a.diagnoses}
        db = {d.id: d for d in self.b.diagnoses}
        return {
            "json_schema": JSON_SCHEMA,
            "a": {"path": str(self.a.run.path), "name": self.a.run.name, "verdict": self.a.verdict},
            "b": {"path": str(self.b.run.path), "name": self.b.run.name, "verdict": self.b.verdict},
            "metrics": [{k: (v if k == "metric" else num(v)) for k, v in row.items()} for row in self.metrics.to_dict("records")],
            "speedup_measured": num(self.speedup_measured),
            "resolved": [{"id": i, "severity": da[i].severity, "title": da[i].title,
                          "estimated_speedup_max": self.estimates.get(i), "within_estimate": self.within_estimate(i)}
                         for i in self.resolved],
            "new": [{"id": i, "severity": db[i].severity, "title": db[i].title} for i in self.new],
            "persisting": list(self.persisting),
            "mismatches": list(self.mismatches),
        }


def _words(command) -> set[str]:
    """The words of a run's command, its output directory aside (every run has its own)."""
    if isinstance(command, str):
        import shlex

        try:
            command = shlex.split(command)
        except ValueError:
            command = command.split()
    words, skip = set(), False
    for w in command or []:
        if skip:
            skip = False
        elif w == "--out":
            skip = True
        elif not w.startswith("--out="):
            words.add(str(w))
    return words


def default_pair(runs: list[dict]) -> tuple[int, int] | None:
    """(A, B) for a comparison nobody chose yet, as indexes into ``runs`` (load.find_runs: newest
    first): B the newest run, A its closest predecessor — of the older runs, the one with B's world
    size and device whose command shares the most words with B's (a re-run with one toggle
    changed), the newest of equals. None with fewer than two runs."""
    if len(runs) < 2:
        return None
    b = runs[0]
    mine = _words(b.get("command"))

    def likeness(i: int) -> tuple:
        r = runs[i]
        theirs = _words(r.get("command"))
        shared = len(mine & theirs) / len(mine | theirs) if mine | theirs else 0.0
        return (r.get("world_size") == b.get("world_size"), r.get("device") == b.get("device"), shared, -i)

    return max(range(1, len(runs)), key=likeness), 0


PARAMS_TOLERANCE = 0.25
"""Two runs whose models' parameter counts differ by more are two models."""


def _gpu(result: Result) -> str | None:
    from workbench.hardware.devices import resolve

    found = resolve(result.run.device) if result.run.device else None
    return found.gpu.key if found is not None else result.run.device


def mismatches(a: Result, b: Result) -> list[str]:
    """How runs A and B are not like for like: the device class (CPU vs GPU), the GPU model, the
    model (layers, hidden size, parameters), the rank count, a partial or mixed run. Each one line."""
    out: list[str] = []
    if a.run.has_gpu != b.run.has_gpu:
        where = {True: "GPUs", False: "CPUs"}
        out.append(f"the device class: A ran on {where[a.run.has_gpu]}, B on {where[b.run.has_gpu]}")
    elif a.run.has_gpu and _gpu(a) != _gpu(b):
        out.append(f"the GPU: A ran on {a.run.device or 'an unknown GPU'}, B on {b.run.device or 'an unknown GPU'}")
    ma, mb = a.model, b.model
    shape_a = (ma.value("layers"), ma.value("hidden"))
    shape_b = (mb.value("layers"), mb.value("hidden"))
    pa, pb = ma.value("params_total"), mb.value("params_total")
    if all(shape_a) and all(shape_b) and shape_a != shape_b:
        out.append(f"the model: A's has {shape_a[0]} layers of {shape_a[1]}, B's {shape_b[0]} of {shape_b[1]}")
    elif pa and pb and abs(pa / pb - 1) > PARAMS_TOLERANCE:
        out.append(f"the model: A's has {count(pa)} parameters, B's {count(pb)}")
    elif (ma.kind or mb.kind) and ma.kind != mb.kind:
        out.append(f"the model: A's is {ma.kind or 'unknown'}, B's {mb.kind or 'unknown'}")
    if a.run.world_size != b.run.world_size:
        out.append(f"the ranks: A had {a.run.world_size}, B {b.run.world_size}")
    for tag, r in (("A", a), ("B", b)):
        if r.run.partial:
            p = r.run.partial
            out.append(f"{tag} is partial: traces of {len(p['ranks_analysed'])} of its {p['world_size']} ranks")
        if r.run.devices:
            out.append(f"{tag}'s ranks ran on {len(r.run.devices)} GPU models")
    return out


def _serious(result: Result) -> set[str]:
    return {d.id for d in result.serious()}


def compare_runs(a: Result, b: Result) -> Comparison:
    """Compare two analysed runs (:class:`workbench.pipeline.result.Result`; A = before, B = after)."""
    import pandas as pd

    ma, mb = a.metrics.as_dict(), b.metrics.as_dict()
    rows = []
    keys = list(ma) + [k for k in mb if k not in ma]
    keys += [k for k in ALWAYS if k not in keys]  # the rows a reader looks for, "–" where a run did not measure them
    for k in keys:
        va, vb = ma.get(k), mb.get(k)
        delta = vb - va if va is not None and vb is not None else None
        pct = 100.0 * delta / va if delta is not None and va else None
        rows.append({"metric": k, "a": va, "b": vb, "delta": delta, "delta_pct": pct})
    metrics = pd.DataFrame(rows, columns=["metric", "a", "b", "delta", "delta_pct"])
    sa, sb = _serious(a), _serious(b)
    order_a = [d.id for d in a.diagnoses]
    order_b = [d.id for d in b.diagnoses]
    resolved = [i for i in order_a if i in sa and i not in sb]
    new = [i for i in order_b if i in sb and i not in sa]
    persisting = [i for i in order_a if i in sa and i in sb]
    step_a, step_b = ma.get("step_ms"), mb.get("step_ms")
    speedup = step_a / step_b if step_a and step_b else None
    estimates = {d.id: d.estimated_gain.get("speedup_max") for d in a.diagnoses if d.id in resolved}
    return Comparison(a=a, b=b, metrics=metrics, resolved=resolved, new=new, persisting=persisting,
                      speedup_measured=speedup, estimates=estimates, mismatches=mismatches(a, b))
