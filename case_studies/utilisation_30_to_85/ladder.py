"""Run the case study's ladder: train each rung with profiling, diagnose it, compare it with the
rung before, and write the raw numbers.

    # on the GPU machine (one H200): calibrate the per-sample CPU cost, run gpu/*.toml
    PYTHONPATH=. python case_studies/utilisation_30_to_85/ladder.py --scale gpu --out runs/case
    # here (CPU, 2 gloo ranks): the same story at test scale (tests/diagnose/test_case_study.py runs it)
    python case_studies/utilisation_30_to_85/ladder.py --scale cpu --out /tmp/case
    # the committed rungs (traces/case_cpu_*, copied into OUT/<rung>), analysed without training
    python case_studies/utilisation_30_to_85/ladder.py --scale cpu --out /tmp/case --reuse
    # anywhere with plotly: RESULTS.md's tables and figures from the raw numbers
    python case_studies/utilisation_30_to_85/render.py case_studies/utilisation_30_to_85/results_gpu.json

For every rung it records: hardware and versions, NVML mean GPU utilisation over the steady
steps, trace GPU busy % (kernels) over the profiled steps, median step time, tokens/s, speed-up
vs the baseline, the diagnoses, and — against the rung before — the measured gain next to the
tool's estimate and whether the config change is one the tool recommended (a `fix` key of a
diagnosis at warning or above on the rung before). No plotting here: the GPU box has no plotly.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from workbench.pipeline.compare import compare_runs  # noqa: E402
from workbench.pipeline.verdict import analyze_run  # noqa: E402

SCALES = {
    # scale: (rung directory, ranks, profiler schedule)
    "gpu": ("gpu", 1, "6,2,4"),
    "cpu": ("cpu", 2, "4,1,3"),
}


def calibrate_round_ms(rounds: int = 400) -> float:
    """CPU time of one round of the dataset's per-sample work (128x128 matmul + tanh), one thread,
    as a DataLoader worker runs it (torch sets workers to one thread)."""
    import torch

    torch.set_num_threads(1)
    m = torch.randn(128, 128)
    for _ in range(50):
        m = torch.tanh(m @ m.T / 11.0)
    t0 = time.perf_counter()
    for _ in range(rounds):
        m = torch.tanh(m @ m.T / 11.0)
    return (time.perf_counter() - t0) * 1e3 / rounds


def flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        out.update(flat(v, key + ".") if isinstance(v, dict) else {key: v})
    return out


def changed_keys(prev: dict[str, Any], cur: dict[str, Any]) -> list[str]:
    a, b = flat(prev), flat(cur)
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def steady_steps(run_dir: Path) -> tuple[float, float | None, list[tuple[float, float]]]:
    """The run's steady steps as ``workbench.format.steady`` defines them (step ≥ 1, not
    profiled; the numbers ``workbench compare`` and ``--json`` ``metrics`` give): (mean step ms,
    tokens/s of the job, [(start, end)] of rank 0's steady steps for the NVML mean).

    The NVML windows leave out a steady step whose step before is not steady (step 1, the first
    after the profiled window): NVML's utilisation is the busy share of a trailing sample period of
    up to 1 s (nvmlDeviceGetUtilizationRates), so its sample reads the start-up or the trace export
    before it (0–4 % on case_gpu_2_preload_shm and case_gpu_3_batch32 against 93–100 % around it).
    """
    import pandas as pd

    from workbench.analysis.job import steady_step_ms, tokens_per_s
    from workbench.format.steady import steady_steps as steady, steady_summary

    frames = {int(f.stem.removeprefix("steps_rank")): pd.read_csv(f) for f in run_dir.glob("steps_rank*.csv")}
    warmup = (json.loads((run_dir / "manifest.json").read_text()).get("schedule") or {}).get("warmup")
    summary = steady_summary(frames, warmup=warmup)  # the profiler's warm-up steps are not steady
    s = steady(frames[0], warmup)
    s = s[(s["step"] - 1).isin(s["step"])]
    windows = list(zip(s["start_unix_s"], s["start_unix_s"] + s["step_ms"] / 1e3))
    return steady_step_ms(summary), tokens_per_s(summary), windows


def mfu_steady(run_dir: Path, tokens_per_s: float | None) -> float | None:
    """MFU of the steady steps (PaLM): tokens/s per device × the model's FLOPs per token (the engine
    writes ``flops_per_token`` in the manifest's config) over the device's dense bf16 peak."""
    from workbench.hardware.peaks import mfu_pct

    m = json.loads((run_dir / "manifest.json").read_text())
    fpt = (m.get("config") or {}).get("flops_per_token")
    world = int(m.get("world_size") or 1)
    return mfu_pct(tokens_per_s / world, fpt, m.get("device_name")) if tokens_per_s else None


def nvml_mean(run_dir: Path, windows: list[tuple[float, float]]) -> tuple[float | None, str]:
    """Mean NVML GPU utilisation (%) of the samples inside the steady steps, all ranks, and the source."""
    import pandas as pd

    vals, source = [], "none"
    for f in sorted(run_dir.glob("nvml_rank*.csv")):
        df = pd.read_csv(f)
        source = str(df["source"].iloc[0]) if len(df) else source
        inside = pd.Series(False, index=df.index)
        for lo, hi in windows:
            inside |= df["ts_unix_s"].between(lo, hi)
        w = df[inside]
        if source == "nvml" and w["gpu_util_pct"].notna().any():
            vals.append(float(w["gpu_util_pct"].mean()))
    return (sum(vals) / len(vals) if vals else None), source


def run_rung(cfg: Path, out: Path, ranks: int, schedule: str, overrides: list[str]) -> int:
    cmd = [sys.executable, "-m", "workbench", "train", "--config", str(cfg.relative_to(ROOT)), "--profile", "--out", str(out),
           "--schedule", schedule, *(["--nproc-per-node", str(ranks)] if ranks > 1 else [])]
    for o in overrides:
        cmd += ["--set", o]
    print("$", " ".join(cmd), flush=True)
    return subprocess.call(cmd, cwd=ROOT, env=dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"))


def hardware(run_dir: Path) -> dict[str, Any]:
    m = json.loads((run_dir / "manifest.json").read_text())
    return {k: m.get(k) for k in ("device_name", "device_memory_bytes", "versions", "hosts", "world_size")} | {
        "cpu_count": (m.get("ranks", {}).get("0") or {}).get("cpu_count")}


def rung_entry(cfg: Path, raw_cfg: dict, run_dir: Path, code: int, base: dict | None, prev) -> tuple[dict[str, Any], Any]:
    """One rung's results entry, analysed from its run directory (``prev``: the previous rung's
    (entry, analysis, config), for the measured speed-up against its estimate)."""
    entry: dict[str, Any] = {"rung": cfg.stem, "config": str(cfg.relative_to(ROOT)), "exit_code": code,
                             "run_dir": str(run_dir)}
    if code != 0:
        entry["error"] = "training failed; see the run's manifest"
        return entry, None
    analysis = analyze_run(run_dir)
    metrics = analysis.metrics()
    step_ms, tokens, windows = steady_steps(run_dir)
    util, source = nvml_mean(run_dir, windows)
    entry.update(
        hardware=hardware(run_dir),
        nvml_mean_util_pct=util,
        nvml_source=source,
        trace_gpu_busy_pct=metrics.get("gpu_busy_pct"),
        trace_compute_busy_pct=metrics.get("compute_busy_pct"),
        mfu_pct_steady=mfu_steady(run_dir, tokens),
        mfu_pct_trace=(analysis.efficiency_json() or {}).get("mfu_pct"),
        step_ms=step_ms,
        tokens_per_s=tokens,
        breakdown_pct=analysis.breakdown_pct(),
        diagnoses=[{k: d.to_dict()[k] for k in ("id", "severity", "title", "estimated_gain", "fix")} for d in analysis.diagnoses],
        verdict=analysis.verdict,
        config_flat=flat(raw_cfg),
    )
    base = base or entry
    entry["speedup_vs_baseline"] = base["step_ms"] / step_ms
    if prev is not None:
        prev_entry, prev_analysis, prev_cfg = prev
        cmp = compare_runs(prev_analysis.result(), analysis.result()).to_json()
        changed = changed_keys(prev_cfg, raw_cfg)
        recommended = [d for d in prev_entry["diagnoses"] if d["severity"] in ("warning", "critical")]
        followed = [d["id"] for d in recommended if any(k in d["fix"] or any(k.startswith(f + ".") for f in d["fix"]) for k in changed)]
        entry["vs_previous"] = {
            "changed": changed,
            "fix_of": followed,
            "fix_followed": bool(followed),
            # throughput where both rungs say their tokens (a rung may change the batch), else step time
            "speedup_measured": (tokens / prev_entry["tokens_per_s"] if tokens and prev_entry.get("tokens_per_s")
                                 else prev_entry["step_ms"] / step_ms),
            "measured_by": "tokens/s" if tokens and prev_entry.get("tokens_per_s") else "step time",
            "estimated_speedup_max": {d["id"]: d["estimated_gain"].get("speedup_max") for d in recommended if d["id"] in followed},
            "resolved": cmp.get("resolved"),
            "new": cmp.get("new"),
        }
    return entry, analysis


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", choices=SCALES, required=True)
    p.add_argument("--rungs-dir", type=Path, default=None,
                   help="another ladder's folder of rung TOMLs (e.g. case_studies/mfu_34_to_50/gpu); "
                        "default: this study's <scale>/ folder")
    p.add_argument("--out", type=Path, required=True, help="where the rungs' run directories go")
    p.add_argument("--rungs", default=None, help="comma-separated rung file stems (default: all, in order)")
    p.add_argument("--sample-cost-ms", type=float, default=None,
                   help="GPU scale: CPU ms per sample of the transform (calibrated into data.sample_cost)")
    p.add_argument("--json", type=Path, default=None, help="results file (default OUT/results.json)")
    p.add_argument("--reuse", action="store_true",
                   help="analyse the rung run directories already in OUT (e.g. copies of traces/case_cpu_*) "
                        "instead of training them again")
    args = p.parse_args(argv)

    rung_dir, ranks, schedule = SCALES[args.scale]
    rungs = sorted((args.rungs_dir.resolve() if args.rungs_dir else HERE / rung_dir).glob("*.toml"))
    if args.rungs:
        wanted = args.rungs.split(",")
        rungs = [r for r in rungs if r.stem in wanted]
    overrides: list[str] = []
    calibration = None
    if args.sample_cost_ms:
        round_ms = calibrate_round_ms()
        cost = max(1, round(args.sample_cost_ms / round_ms))
        overrides.append(f"data.sample_cost={cost}")
        calibration = {"round_ms": round(round_ms, 4), "sample_cost_ms": args.sample_cost_ms, "sample_cost_rounds": cost}
        print(f"calibration: one round = {round_ms:.4f} ms → data.sample_cost = {cost}", flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"scale": args.scale, "ranks": ranks, "schedule": schedule, "calibration": calibration,
                               "overrides": overrides, "rungs": []}
    prev = None
    out_json = args.json or args.out / "results.json"
    for cfg in rungs:
        run_dir = args.out / cfg.stem
        if args.reuse and (run_dir / "manifest.json").exists():
            code = int(json.loads((run_dir / "manifest.json").read_text()).get("exit_code") or 0)
        else:
            code = run_rung(cfg, run_dir, ranks, schedule, overrides)
        raw_cfg = tomllib.loads(cfg.read_text())
        entry, analysis = rung_entry(cfg, raw_cfg, run_dir, code, results["rungs"][0] if results["rungs"] else None, prev)
        if code != 0:
            results["rungs"].append(entry)
            break
        util = entry["nvml_mean_util_pct"]
        print(f"== {cfg.stem}: step {entry['step_ms']:.1f} ms, NVML util {util if util is None else round(util, 1)}%, "
              f"busy {entry['trace_gpu_busy_pct'] or entry['trace_compute_busy_pct']}%, "
              f"×{entry['speedup_vs_baseline']:.2f} vs baseline; {analysis.verdict}", flush=True)
        results["rungs"].append(entry)
        prev = (entry, analysis, raw_cfg)
        out_json.write_text(json.dumps(results, indent=2, default=str))  # after every rung: a cut-off run keeps its rungs

    out_json.write_text(json.dumps(results, indent=2, default=str))
    print(f"results: {out_json}")
    return 0 if all(r.get("exit_code") == 0 for r in results["rungs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
