"""Predicted vs measured for the out-of-memory check (benchmarks/gpu_oom_fit.sh's packs).

    python -m benchmarks.oom_fit DIR     # DIR: where oom_fit_<run>.tar.gz were copied (unpacked here)

For each job that ran out of memory (tt_none, tt_selective, hf_oom): the verdict, the model's unique
parameters against the job's own count (torchtitan's model of Qwen3-4B: 4,022,468,096 with its tied
table once; the Trainer script prints its own ``truth:`` line), the weights in memory_by_category
against that count × 4 bytes, and the one-GPU alternative the workbench offered with full
recomputation beside the run that measured it (tt_full, hf_full): allocator peak (allocated and
reserved) and the job's step. The acceptance's bands: parameters within 1 %, weights within 5 %, the
alternative's memory within 5 % of the allocated peak (10 % of the reserved), its step within 15 %.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

QWEN3_4B_PARAMS = 4_022_468_096
"""torchtitan's Qwen3-4B (flavor 4B: 36 layers, dim 2560, 32 heads / 8 kv of 128, FFN 9728, vocab
151,936, tied): its parameters with the tied table once (docs NOTES: torchtitan prints 3,633,511,936,
the count without the table)."""
PAIRS = {"tt_none": "tt_full", "tt_selective": "tt_full", "hf_oom": "hf_full"}


def unpack(d: Path) -> dict[str, Path]:
    runs = {}
    for pack in sorted(d.glob("oom_fit_*.tar.gz")):
        name = pack.name.removeprefix("oom_fit_").removesuffix(".tar.gz")
        with tarfile.open(pack) as t:
            t.extractall(d, filter="data")
        runs[name] = d / name
    return runs


def analyze(run: Path) -> dict:
    r = subprocess.run([sys.executable, "-m", "workbench", "analyze", "--json", "--no-cache", str(run)],
                       capture_output=True, text=True, timeout=900)
    if r.returncode:
        raise SystemExit(f"workbench analyze {run}: {r.stderr.strip()[-400:]}")
    return json.loads(r.stdout)


def truth_params(run: Path) -> int | None:
    log = (run / "console.log").read_text(errors="ignore") if (run / "console.log").exists() else ""
    m = re.search(r"truth: parameters (\d+)", log)
    if m:
        return int(m.group(1))
    return QWEN3_4B_PARAMS if "qwen3" in log.lower() or "Qwen3" in log else None


def pct(a: float | None, b: float | None) -> str:
    return "—" if not a or not b else f"{100 * (a / b - 1):+.1f} %"


def main(argv: list[str] | None = None) -> int:
    d = Path((argv or sys.argv[1:] or ["."])[0])
    runs = unpack(d)
    docs = {name: analyze(path) for name, path in runs.items()}
    rows = []
    for oom, alt_run in PAIRS.items():
        if oom not in docs:
            continue
        doc = docs[oom]
        f = next((x for x in doc["diagnoses"] if x["id"] == "out_of_memory"), None)
        params = (doc["model"]["fields"].get("params_total") or {}).get("value")
        truth = truth_params(runs[oom])
        weights = ((doc.get("memory") or {}).get("by_category") or {}).get("weights", {}).get("bytes")
        alts = (f or {}).get("alternatives") or []
        full = next((a for a in alts if (a.get("settings") or {}).get("recompute") == "full"
                     and (a.get("settings") or {}).get("grad_accum", 1) == 1), None)
        measured = docs.get(alt_run, {})
        m = measured.get("metrics", {})
        step = m.get("steady_step_ms") or measured.get("summary", {}).get("step_ms")
        rows.append({"job": oom, "verdict": f["title"] if f else doc["verdict"], "params": params, "truth": truth,
                     "weights_gib": None if weights is None else weights / 2**30,
                     "offered": [f"{a['change']}: {a['memory_gib']} GiB, {a.get('step_ms')} ms" for a in alts[:4]],
                     "full_pred_gib": full and full["memory_gib"], "full_pred_ms": full and full["step_ms"],
                     "full_basis": full and full["basis"], "measured_run": alt_run,
                     "measured_alloc_gib": m.get("peak_allocated_gib"), "measured_reserved_gib": m.get("peak_reserved_gib"),
                     "measured_step_ms": step})
    for r in rows:
        print(f"== {r['job']}: {r['verdict']}")
        print(f"   parameters {r['params']:,} vs {r['truth'] or 0:,} ({pct(r['params'], r['truth'])})" if r["params"] else
              "   parameters: none inferred")
        if r["weights_gib"] is not None and r["truth"]:
            print(f"   weights {r['weights_gib']:.2f} GiB vs {r['truth'] * 4 / 2**30:.2f} ({pct(r['weights_gib'], r['truth'] * 4 / 2**30)})")
        for o in r["offered"]:
            print(f"   offered: {o}")
        print(f"   full recomputation: predicted {r['full_pred_gib']} GiB, {r['full_pred_ms']} ms; measured ({r['measured_run']}) "
              f"{r['measured_alloc_gib']} GiB allocated ({pct(r['full_pred_gib'], r['measured_alloc_gib'])}), "
              f"{r['measured_reserved_gib']} reserved ({pct(r['full_pred_gib'], r['measured_reserved_gib'])}), "
              f"{r['measured_step_ms']} ms ({pct(r['full_pred_ms'], r['measured_step_ms'])})")
        print(f"   basis: {r['full_basis']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
