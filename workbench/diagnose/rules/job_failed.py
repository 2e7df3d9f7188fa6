"""``job_failed``: the job ended with an error other than running out of memory.

Signal: the run's manifest says ``status: failed`` (a rank's script raised or exited non-zero, or a
rank died without reporting) and no rank's error is an out-of-memory one (``out_of_memory`` answers
those). Always critical: the run is over. The evidence is the first failing rank's error, its type,
the step in flight and its phase, the frame that raised, and the last step each rank completed.
Collective timeouts name the ranks: NCCL's watchdog says which rank's work timed out and on which
collective; gloo says how long it waited; a peer that died shows as "Connection closed by peer" on
the ranks that outlived it. The ranks that timed out waited on the ones that did not reach the
collective: those are named as the ones to look at.
"""

from __future__ import annotations

from workbench.diagnose.base import Context, Diagnosis
from workbench.diagnose.registry import rule
from workbench.analysis.trainer_run import logged_step


@rule("job_failed", reads=(), group="failure",  # the manifest and the steps CSVs only
      summary="the job ended with an error (not out of memory): the error, the step and phase, collective "
              "timeouts and dead ranks named",
      threshold="always critical", source="the ranks' status files")
def job_failed(ctx: Context) -> Diagnosis | None:
    f = ctx.failure
    if not f or any(e.get("kind") == "out_of_memory" for e in f["ranks"]):
        return None
    died = f.get("ranks_died") or []
    failed = f["ranks"]
    first = failed[0] if failed else {}
    timeouts = [e for e in failed if e.get("kind") == "collective_timeout"]
    peers = [e["rank"] for e in failed if e.get("kind") == "peer_failure" and e.get("rank") is not None]
    last = {}
    for r, df in (ctx.steps or {}).items():
        if df is not None and len(df) and "step" in df:
            last[int(r)] = int(df["step"].max())
    evidence = {"rank": first.get("rank"), "error": (first.get("error") or f.get("error") or "")[:600],
                "error_type": first.get("error_type"), "where": first.get("where"), "step": first.get("step"),
                "phase": first.get("phase"), "exit_code": f.get("exit_code"), "signal": f.get("signal"),
                "ranks_failed": [e["rank"] for e in failed if e.get("rank") is not None], "ranks_died": died,
                "last_step_completed": last or None}
    if timeouts:
        evidence["timeouts"] = [{"rank": e["rank"], **e["timeout"]} for e in timeouts]
    if peers:
        evidence["ranks_lost_a_peer"] = peers
    world = set(range(ctx.world_size)) if ctx.world_size else set()
    if died:
        title = f"rank {died[0]} died without reporting (SIGKILL, the host's OOM killer, a segfault)"
        rec = (f"look at rank {died[0]}'s own output and the host's kernel log (dmesg: the OOM killer) or the scheduler's; "
               "the other ranks' errors are what its death did to them")
        ranks = died
    elif timeouts:
        timed = sorted({e["timeout"].get("rank", e["rank"]) for e in timeouts if e.get("rank") is not None})
        stuck = sorted(world - set(timed)) if world else []
        op = next((e["timeout"].get("op") for e in timeouts if e["timeout"].get("op")), "a collective")
        waited = next((e["timeout"].get("timeout_ms") for e in timeouts if e["timeout"].get("timeout_ms")), None)
        title = (f"collective {op} timed out on rank{'s' * (len(timed) != 1)} {', '.join(map(str, timed))}"
                 + (f" after {waited / 1000:g} s" if waited else "")
                 + (f": rank{'s' * (len(stuck) != 1)} {', '.join(map(str, stuck))} never joined it" if stuck else ""))
        evidence["ranks_timed_out"] = timed
        evidence["ranks_not_joining"] = stuck
        rec = ((f"look at what rank{'s' * (len(stuck) != 1)} {', '.join(map(str, stuck))} did instead (its error and stack: "
                "a failure, a hang, a different collective order, a data-dependent branch); ") if stuck else
               "a rank stopped joining the collective: compare the ranks' last steps and stacks; ") + \
              "raise the timeout (init_process_group(timeout=…)) only if a rank is legitimately slow"
        ranks = stuck or timed
    else:
        where = f" at {first['where']}" if first.get("where") else ""
        step = f" in step {logged_step(first['step'], ctx.trainer)}" if first.get("step") is not None else ""
        who = f"rank {first['rank']}" if first.get("rank") is not None else "the job"
        text = (first.get("error") or f.get("error") or f"exit code {f.get('exit_code')}").splitlines()[0][:200]
        title = f"{who} failed{step}: {text}"
        rec = (f"fix the script's error{where}"
               + (f" ({first['phase']})" if first.get("phase") else "")
               + "; what was captured before it (steps, samples, the trace of a completed window) is kept")
        ranks = [first["rank"]] if first.get("rank") is not None else []
    return Diagnosis(id="job_failed", severity="critical", title=title, evidence=evidence, recommendation=rec,
                     estimated_gain={"step_time_saved_pct": 0.0, "speedup_max": None,
                                     "protects": "the run itself: it ended",
                                     "formula": "no time gain: the gain is a run that completes"},
                     fix=[], ranks=ranks)
