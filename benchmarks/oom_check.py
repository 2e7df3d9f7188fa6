"""The out-of-memory check on one H200 (left for a session with a GPU; nothing here has run on one yet).

1. On the device machine (see benchmarks/torchtitan_gpu.sh for the carry):
       bash benchmarks/torchtitan_gpu.sh OUT 8b_none_oom 8b_full 8b_selective
   torchtitan's Llama 3 8B without activation recomputation at seq 8192 runs out of memory in its second
   step; its first steps are recorded (--schedule 0,0,2) and the allocator's history is kept
   (--memory-history 100000: its capture cost is the step time of this run's step 0 against 8b_full's
   unprofiled step, and the dump's own time is memory_rank0.json's memory_history.dump_ms).
2. Here, with the packs unpacked under DIR:
       python -m benchmarks.oom_check DIR
   prints `workbench analyze`'s out_of_memory (exit code, the failure's figures, memory by category)
   and, for each one-GPU alternative the planner offered, the run that measured it (8b_full for
   "recompute full", 8b_selective for "recompute selective") beside the prediction:
   acceptance is the peak within 10 % and the step within 15 %, weights and optimizer within 5 % of the
   capture's measured bytes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

MEASURED = {"full": "8b_full", "selective": "8b_selective"}


def main(root: str) -> int:
    root = Path(root)
    oom = root / "8b_none_oom"
    r = subprocess.run([sys.executable, "-m", "workbench", "analyze", "--json", str(oom)], capture_output=True, text=True)
    print(f"analyze exit {r.returncode}")
    if r.returncode:
        print(r.stderr[-2000:])
        return 1
    doc = json.loads(r.stdout)
    d = next((x for x in doc["diagnoses"] if x["id"] == "out_of_memory"), None)
    if d is None:
        print("no out_of_memory finding:", doc["verdict"])
        return 1
    print(f"{d['severity']}: {d['title']}")
    print("evidence:", json.dumps({k: v for k, v in d["evidence"].items() if k != "error"}, indent=1))
    mem = json.loads((oom / "memory_rank0.json").read_text()) if (oom / "memory_rank0.json").exists() else {}
    first = mem.get("first_step") or {}
    cats = (doc.get("memory") or {}).get("by_category", {})
    for k, measured in (("weights", first.get("params_bytes")), ("optimizer", first.get("optimizer_bytes"))):
        got = (cats.get(k) or {}).get("bytes")
        if got and measured:
            print(f"{k}: {got / 2**30:.2f} GiB in memory.by_category vs {measured / 2**30:.2f} GiB measured ({100 * (got / measured - 1):+.1f} %)")
    print("memory_history:", mem.get("memory_history"))
    print("\n| alternative | predicted step | measured step | predicted peak | measured peak |\n|---|---:|---:|---:|---:|")
    for a in d.get("alternatives") or []:
        run = next((root / name for rc, name in MEASURED.items() if a["gpus"] == 1 and f"recompute {rc}" in a["change"]), None)
        if run is None or not run.exists():
            print(f"| {a['change']} | {a['step_ms']:.0f} ms | (not run) | {a['memory_gib']:.1f} GiB | |")
            continue
        m = json.loads(subprocess.run([sys.executable, "-m", "workbench", "analyze", "--json", str(run)],
                                      capture_output=True, text=True).stdout)
        step, peak = m["metrics"].get("step_ms"), m["metrics"].get("peak_reserved_gib")
        print(f"| {a['change']} | {a['step_ms']:.0f} ms | {step:.0f} ms ({100 * (a['step_ms'] / step - 1):+.1f} %) | "
              f"{a['memory_gib']:.1f} GiB | {peak:.1f} GiB ({100 * (a['memory_gib'] / peak - 1):+.1f} %) |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "runs/oom"))
