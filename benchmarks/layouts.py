"""Every engine layout and fault twin on N ranks, profiled, measured and diagnosed: one table.

For each layout (DDP, ZeRO-1/2/3, TP, PP, and with enough ranks FSDP2 x TP, DP x PP, dp x pp x tp)
it runs ``workbench train --profile`` on the same model and reads the run directory back:
step time and tokens/s from the *unprofiled* steps of ``steps_rank{r}.csv`` (median over the
steps after the first; the profiler's own steps are left out), MFU per device from the
manifest's ``flops_per_token`` and the device's peak (PaLM appendix B), the trace's GPU or
compute busy %, exposed communication, and the diagnoses. Then each fault twin (redundant
all-gather, straggler rank, slow data) against its clean twin: the rule must fire on the fault and
stay quiet on the clean run.

CPU (gloo; the plumbing and the CPU numbers):
    python -m benchmarks.layouts --nproc 2 --out runs/layouts
    python -m benchmarks.layouts --nproc 8 --only 3d --out runs/layouts8
GPUs (NCCL; one command for the whole table):
    python -m benchmarks.layouts --nproc 8 --config case_studies/engine/gpt370m_fsdp.toml \\
        --set data.batch_size=8 --steps 12 --out runs/layouts --json layouts.json

Prints a markdown table (and writes ``--json``); exit 1 when a twin's rule misbehaves or a run fails.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.measure import ROOT

# name, extra --set overrides (N = world size), minimum world size
LAYOUTS: list[tuple[str, list[str], int]] = [
    ("ddp", ["parallel.mode=ddp"], 1),
    ("zero1", ["parallel.mode=zero1"], 2),
    ("zero2", ["parallel.mode=zero2"], 1),
    ("zero3", ["parallel.mode=zero3"], 1),
    ("tp", ["parallel.mode=tp", "parallel.tp={N}"], 2),
    ("pp", ["parallel.mode=pp", "parallel.pp={N}", "parallel.microbatches={M}", "model.tie_embeddings=false"], 2),
    ("fsdp_tp", ["parallel.mode=tp", "parallel.tp=2"], 4),
    ("dp_pp", ["parallel.mode=pp", "parallel.pp=2", "parallel.microbatches={M}", "model.tie_embeddings=false"], 4),
    ("3d", ["parallel.mode=pp", "parallel.pp=2", "parallel.tp=2", "parallel.microbatches={M}",
            "model.tie_embeddings=false"], 8),
]
# fault, its overrides, the clean twin's overrides, the rule that must fire on the fault only
TWINS: list[tuple[str, list[str], list[str], str]] = [
    ("redundant_allgather", ["parallel.mode=ddp", "faults.redundant_allgather=true"], ["parallel.mode=ddp"],
     "redundant_allgather"),
    ("straggler", ["parallel.mode=ddp", "faults.straggler_rank={LAST}", "faults.straggler_ms=40"], ["parallel.mode=ddp"],
     "straggler_rank"),
    ("slow_data", ["parallel.mode=ddp", "data.num_workers=0", "faults.slow_data=true"],
     ["parallel.mode=ddp", "data.num_workers=4", "data.persistent_workers=true", "data.prefetch_factor=4"],
     "dataloader_stall"),
]
SEVERE = ("warning", "critical")


@dataclass
class Row:
    name: str
    ok: bool
    world: int
    step_ms: float | None = None
    tokens_per_s: float | None = None
    tokens_per_s_per_device: float | None = None
    mfu_pct: float | None = None
    busy_pct: float | None = None
    exposed_comm_pct: float | None = None
    diagnoses: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    error: str = ""


def run_layout(name: str, sets: list[str], args: argparse.Namespace) -> Row:
    out = Path(args.out) / name
    cmd = [sys.executable, "-m", "workbench", "train", "--config", args.config, "--nproc-per-node", str(args.nproc),
           "--profile", "--no-analyze", "--out", str(out), "--schedule", args.schedule,
           "--set", f"train.steps={args.steps}"]
    for s in [*args.set, *sets]:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
    row = Row(name=name, ok=r.returncode == 0, world=args.nproc, seconds=round(time.perf_counter() - t0, 1))
    if not row.ok:
        lines = [ln for ln in (r.stderr + r.stdout).splitlines() if re.search(r"Error|error:", ln)]
        row.error = (lines[-1] if lines else f"exit code {r.returncode}")[:300]
        return row
    measure(row, out)
    return row


def measure(row: Row, run_dir: Path) -> None:
    import pandas as pd

    from workbench.load import load_run
    from workbench.hardware.peaks import mfu_pct
    from workbench.pipeline.verdict import analyze_run

    run = load_run(run_dir)
    a = analyze_run(run)
    m = a.metrics()
    # unprofiled steps after the first (warm-up): the same steps on every rank
    steady = []
    for rank, data in sorted(run.ranks.items()):
        df = data.steps
        df = df[(df["profiled"] == 0) & (df["step"] > df["step"].min())]
        steady.append(df.set_index("step")[["step_ms", "tokens"]])
    both = pd.concat(steady, axis=1, keys=range(len(steady)))
    step_ms = float(both.xs("step_ms", axis=1, level=1).max(axis=1).median())  # the slowest rank sets the pace
    tokens = float(both.xs("tokens", axis=1, level=1).sum(axis=1).median())  # shares add up to the job's tokens
    row.step_ms = round(step_ms, 2)
    row.tokens_per_s = round(tokens / (step_ms / 1e3), 1)
    row.tokens_per_s_per_device = round(row.tokens_per_s / row.world, 1)
    mfu = mfu_pct(row.tokens_per_s_per_device, (run.manifest.get("config") or {}).get("flops_per_token"), run.device_name)
    row.mfu_pct = round(mfu, 2) if mfu is not None else None
    row.busy_pct = m.get("gpu_busy_pct", m.get("compute_busy_pct"))
    row.exposed_comm_pct = m.get("exposed_comm_pct")
    row.diagnoses = {d.id: d.severity for d in a.diagnoses}


def fmt(v, spec: str = ".1f") -> str:
    return "—" if v is None else format(v, spec)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=2, help="ranks (GPUs on a GPU machine)")
    p.add_argument("--config", default="case_studies/engine/ddp_tiny.toml", help="base engine config")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every run")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--schedule", default="1,1,3", help="profiler schedule (the steps it covers are not timed)")
    p.add_argument("--only", action="append", default=[], help="run only these layouts / twins (repeatable)")
    p.add_argument("--no-twins", action="store_true", help="layouts only")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--out", default="runs/layouts")
    p.add_argument("--json", default=None, help="write the rows here")
    args = p.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    subst = {"N": args.nproc, "M": args.microbatches, "LAST": args.nproc - 1}

    def chosen(name: str) -> bool:
        return not args.only or name in args.only

    rows: list[Row] = []
    for name, sets, min_world in LAYOUTS:
        if args.nproc >= min_world and chosen(name) and not (name == "pp" and args.nproc > 4):
            print(f"== {name}", flush=True)
            rows.append(run_layout(name, [s.format(**subst) for s in sets], args))
    checks: list[dict] = []
    if not args.no_twins and args.nproc > 1:
        for name, bad, clean, rule in TWINS:
            if not chosen(name):
                continue
            print(f"== {name} (and its clean twin)", flush=True)
            fault = run_layout(f"fault_{name}", [s.format(**subst) for s in bad], args)
            twin = run_layout(f"clean_{name}", [s.format(**subst) for s in clean], args)
            rows += [fault, twin]
            checks.append({"fault": name, "rule": rule, "fires": fault.diagnoses.get(rule) in SEVERE,
                           "quiet_on_twin": twin.diagnoses.get(rule) not in SEVERE, "ok": fault.ok and twin.ok})

    print("\n| run | ranks | step (ms) | tokens/s | tokens/s/device | MFU (%) | busy (%) | exposed comm (%) | warnings |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        warn = ", ".join(f"{k} ({v})" for k, v in r.diagnoses.items() if v in SEVERE) or ("FAILED: " + r.error if not r.ok else "none")
        print(f"| {r.name} | {r.world} | {fmt(r.step_ms)} | {fmt(r.tokens_per_s, ',.0f')} | {fmt(r.tokens_per_s_per_device, ',.0f')} "
              f"| {fmt(r.mfu_pct)} | {fmt(r.busy_pct)} | {fmt(r.exposed_comm_pct)} | {warn} |")
    for c in checks:
        print(f"twin {c['fault']}: {c['rule']} fires on the fault: {c['fires']}, quiet on the clean twin: {c['quiet_on_twin']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"nproc": args.nproc, "config": args.config, "set": args.set,
                                               "rows": [asdict(r) for r in rows], "twins": checks}, indent=2))
    bad = [r.name for r in rows if not r.ok] + [c["fault"] for c in checks if not (c["fires"] and c["quiet_on_twin"])]
    if bad:
        print(f"problems: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
