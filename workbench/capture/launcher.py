"""``workbench profile``: run an unmodified training script under capture, 1..N ranks.

- No ``--nproc-per-node`` (launch "python"): one child ``python -m workbench.capture.bootstrap``
  with the environment as it is, so the script runs as ``python SCRIPT`` would run it. Frameworks
  read torchrun's variables to decide how to run: Lightning with ``devices=2`` under them waits for
  a second rank nobody starts, Hugging Face's Trainer becomes a one-rank distributed job.
- ``--nproc-per-node 1`` (launch "torchrun"): the same child with the variables
  ``torchrun --nproc-per-node 1`` would set (:func:`single_rank_env`), for a script written for
  torchrun (``os.environ["LOCAL_RANK"]``, ``init_process_group()`` from env).
- ``--nproc-per-node N > 1``: ``python -m torch.distributed.run --nproc-per-node N -m
  workbench.capture.bootstrap``; torchrun sets RANK/WORLD_SIZE/MASTER_ADDR as for any torchrun job.
- Already a rank (started under torchrun, or srun with SLURM_PROCID): capture in this process.

The child's stdout/stderr are inherited (they pass through unchanged); the exit code returned is
the script's own (the first failing rank's when several ran), 128 + the signal's number when
``workbench profile`` was ended by SIGINT/SIGTERM/SIGHUP (passed on to the job, see
:mod:`workbench.capture.job_control`). The manifest is written before the script starts and
completed when it ends, so a crashed, killed or interrupted run still says what happened.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from workbench.format import contract
from workbench.capture.job_control import ChildJob
from workbench.format.errors import WorkbenchError


def parse_schedule(text: str) -> tuple[int, int, int]:
    try:
        wait, warmup, active = (int(x) for x in text.split(","))
    except ValueError:
        raise WorkbenchError(f"--schedule must be WAIT,WARMUP,ACTIVE (three integers), got {text!r}") from None
    if wait < 0 or warmup < 0 or active < 1:
        raise WorkbenchError(f"--schedule needs WAIT>=0, WARMUP>=0, ACTIVE>=1, got {text!r}")
    return wait, warmup, active


STEPS_FROM_HELP = "auto, optimizer, backward, annotation:NAME or time:SEC"


def parse_steps_from(text: str) -> str:
    """Validate a ``--steps-from`` value (see :mod:`workbench.capture.steps`); returns it unchanged."""
    kind, _, arg = text.partition(":")
    if kind in ("auto", "optimizer", "backward") and not arg:
        return text
    if kind == "annotation" and arg:
        return text
    if kind == "time":
        try:
            if float(arg) > 0:
                return text
        except ValueError:
            pass
    raise WorkbenchError(f"--steps-from must be {STEPS_FROM_HELP} (SEC > 0), got {text!r}")


def already_a_rank() -> bool:
    """True when this process was started as one rank of a job (torchrun or srun)."""
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ) or (
        "SLURM_PROCID" in os.environ and int(os.environ.get("SLURM_NTASKS", "1")) > 1
    )


def default_run_dir(script: str, root: Path = Path("traces")) -> Path:
    stem = Path(script).stem
    # Every rank of a job must pick the same directory: use the job's id when there is one.
    job = os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("SLURM_JOB_ID")
    if job and job != "none":
        return root / f"{stem}-{job}"
    return root / f"{stem}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    tmp = run_dir / (contract.MANIFEST + ".tmp")
    try:
        tmp.write_text(json.dumps(manifest, indent=2, default=str))
        os.replace(tmp, run_dir / contract.MANIFEST)  # whole or the previous one
    except OSError as e:
        tmp.unlink(missing_ok=True)
        print(f"workbench: could not update {run_dir / contract.MANIFEST} ({e.strerror or e}); the previous one is kept",
              file=sys.stderr)


def start_manifest(run_dir: Path, command: list[str], nproc: int, schedule: tuple[int, int, int], config: dict | None = None,
                   capture: dict | None = None, launch: str = "torchrun") -> dict[str, Any]:
    manifest = {
        "schema_version": contract.SCHEMA_VERSION,
        "run_id": run_dir.name,
        "command": shlex.join(command),
        "config": config or {},
        "nproc_per_node": nproc,
        "launch": launch,
        "world_size": None,
        "schedule": {"wait": schedule[0], "warmup": schedule[1], "active": schedule[2]},
        "capture": capture or {"steps_from": "auto", "max_steps": None, "stop_after_profile": False},
        "start_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "end_utc": None,
        "status": contract.STATUS_RUNNING,
        "exit_code": None,
        "ranks": {},
    }
    write_manifest(run_dir, manifest)
    return manifest


DIED_WITHOUT_REPORTING = "died without reporting (killed by a signal such as SIGKILL, or the OOM killer)"


def single_rank_env(env: dict[str, str]) -> dict[str, str]:
    """The variables ``torchrun --nproc-per-node 1`` gives its one worker (rendezvous kept local)."""
    return {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0",
            "GROUP_WORLD_SIZE": "1", "ROLE_RANK": "0", "ROLE_WORLD_SIZE": "1",
            "MASTER_ADDR": env.get("MASTER_ADDR") or "127.0.0.1", "MASTER_PORT": env.get("MASTER_PORT") or str(_free_port())}


def finish_manifest(run_dir: Path, manifest: dict[str, Any], exit_code: int, *, signum: int | None = None,
                    job_ended: bool = True, leftovers: list[int] | None = None) -> dict[str, Any]:
    """Fold the ranks' env/status files into the manifest and record how the run ended.

    ``signum``: the signal that ended ``workbench profile`` (the run is then ``interrupted``).
    ``job_ended``: every rank has exited, so a rank with an env file and no status file died
    without reporting (``ranks_died``); False when one rank of a running job writes the manifest.
    """
    ranks: dict[str, Any] = {}
    for env_file in sorted(run_dir.glob("env_rank*.json")):
        info = json.loads(env_file.read_text())
        ranks[str(info["rank"])] = info
    for status_file in sorted(run_dir.glob("status_rank*.json")):
        st = json.loads(status_file.read_text())
        ranks.setdefault(str(st["rank"]), {}).update(st)
    first = ranks[min(ranks, key=int)] if ranks else {}
    from workbench.capture.hang_monitor import hung_ranks

    hung = hung_ranks(run_dir)  # the ranks' watchdogs (--hang-timeout) or a collective's own error
    died = [r for r in _ranks_died(run_dir) if r not in hung] if job_ended else []
    by_rank = [ranks[k] for k in sorted(ranks, key=int)]
    signals = [r["signal"] for r in by_rank if r.get("signal")]
    # A rank that failed on its own (not "interrupted by SIGTERM": torchrun stops the others when one
    # fails) makes the run failed, whatever signal the others got; a signal the user sent wins.
    own_failure = any(r.get("error") and not str(r["error"]).startswith("interrupted by") for r in by_rank)
    sig = signal.Signals(signum).name if signum else (signals[0] if signals and not died and not own_failure else None)
    if hung and not signum:
        status = contract.STATUS_HUNG
    elif sig or (exit_code == 130 and not died and not own_failure):
        status = contract.STATUS_INTERRUPTED
    else:
        status = contract.STATUS_OK if exit_code == 0 and not died else contract.STATUS_FAILED
    manifest.update(
        ranks=ranks,
        world_size=first.get("world_size"),
        hosts=sorted({r.get("host") for r in ranks.values() if r.get("host")}),
        device_name=first.get("device_name"),
        device_memory_bytes=first.get("device_memory_bytes"),
        versions={k: first.get(k) for k in ("python", "torch", "cuda", "nccl")},
        end_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        exit_code=exit_code,
        status=status,
        signal=sig,
        # What marked the steps and why the script ended early, if it did (--max-steps etc.).
        steps_from=next((r["steps_from"] for r in by_rank if r.get("steps_from")), None),
        stopped=next((r["stopped"] for r in by_rank if r.get("stopped")), None),
    )
    if isinstance(first.get("capture_options"), dict):
        manifest["capture"] = {**(manifest.get("capture") or {}), **first["capture_options"]}
    manifest["capture_overhead"] = _capture_overhead(run_dir, manifest)
    # The rank that failed first is the cause; the others' errors are what its failure did to them
    # (a peer's closed connection, a collective's timeout).
    failed = sorted((r for r in by_rank if r.get("error")), key=lambda r: (_end_time(r), int(r["rank"])))
    errors = [f"rank {r['rank']}: {r['error']}" for r in failed]
    if died:
        manifest["ranks_died"] = died
        # The dead rank is the cause; the others' errors are what its death did to them.
        errors.insert(0, f"rank {died[0]} {DIED_WITHOUT_REPORTING}")
    if errors:
        manifest["error"] = errors[0]
    if leftovers:
        # processes the script left running (forked and never reaped): ended with the job
        manifest["leftovers_ended"] = leftovers
    if hung:
        manifest["hang"] = {"ranks": hung, "timeout_s": (manifest.get("capture") or {}).get("hang_timeout_s")}
    write_manifest(run_dir, manifest)
    return manifest


def _end_time(status: dict[str, Any]) -> float:
    t = status.get("end_unix_s")
    return float(t) if isinstance(t, (int, float)) else float("inf")


def _capture_overhead(run_dir: Path, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The recorded steps against the unprofiled ones (:func:`workbench.format.overhead.capture_overhead`),
    from the ranks' step rows; None when a run has not both (or its rows cannot be read)."""
    import csv

    from workbench.format.overhead import capture_overhead

    rows = {}
    for f in sorted(run_dir.glob("steps_rank*.csv")):
        try:
            with f.open(newline="") as fh:
                rows[f.name] = list(csv.DictReader(fh))
        except (OSError, csv.Error, UnicodeDecodeError):
            continue
    return capture_overhead(rows, warmup=(manifest.get("schedule") or {}).get("warmup"))


def _rank_exit_code(run_dir: Path, fallback: int) -> int:
    """The script's exit code: the first non-zero one a rank recorded, else the launcher's."""
    codes = []
    for f in sorted(run_dir.glob("status_rank*.json")):
        try:
            codes.append(int(json.loads(f.read_text())["exit_code"]))
        except (ValueError, KeyError, json.JSONDecodeError):
            continue
    bad = [c for c in codes if c != 0]
    return bad[0] if bad else fallback


def profile(script: str, args: list[str], *, nproc: int | None = None, out: Path | None = None,
            schedule: tuple[int, int, int] = (1, 1, 3), config: dict | None = None,
            command: list[str] | None = None, steps_from: str = "auto", max_steps: int | None = None,
            stop_after_profile: bool = False, profile_memory: bool | None = None,
            memory_history: int = 0, window_on_change: int = 0, hang_timeout: float | None = None) -> tuple[int, Path]:
    """Run ``script`` under capture. Returns (exit code, run directory).

    ``nproc``: None runs one process as ``python SCRIPT`` would; N ranks as ``torchrun
    --nproc-per-node N`` would (its variables at N = 1 too).

    ``command`` is what the manifest records as the user's command (default: the equivalent
    ``workbench profile`` line); ``workbench train`` passes its own. ``steps_from`` says what
    marks a step (:mod:`workbench.capture.steps`); ``profile_memory`` records the profiler's
    per-event memory records (the memory timeline; off by default: the allocator's peaks are in
    every step row); ``memory_history``: entries of the CUDA allocator's history to record (0: off;
    workbench.capture.memory); ``max_steps`` / ``stop_after_profile`` end the
    script cleanly after that many steps / after the last profiled step; ``window_on_change``: a window
    of that many steps where the capture sees the step time change (workbench.capture.windows). SIGUSR1
    to this process asks the job for a window of 3 steps (as ``workbench capture RUN --steps 3``).
    ``hang_timeout``: seconds without progress after which the job is named hung, its ranks' stacks and
    last collectives recorded, and ended (workbench.capture.hang); the exit code is then
    :data:`~workbench.format.contract.HANG_EXIT_CODE`.
    """
    steps_from = parse_steps_from(steps_from)
    if max_steps is not None and max_steps < 1:
        raise WorkbenchError(f"--max-steps must be >= 1, got {max_steps}")
    if hang_timeout is not None and hang_timeout <= 0:
        raise WorkbenchError(f"--hang-timeout must be > 0 seconds, got {hang_timeout:g}")
    capture = {"steps_from": steps_from, "max_steps": max_steps, "stop_after_profile": bool(stop_after_profile)}
    if hang_timeout:
        capture["hang_timeout_s"] = hang_timeout
    if not Path(script).is_file():
        raise WorkbenchError(f"training script not found: {script}")
    if nproc is not None and nproc < 1:
        raise WorkbenchError(f"--nproc-per-node must be >= 1, got {nproc}")
    launch = "python" if nproc is None else "torchrun"
    n = nproc or 1
    run_dir = Path(out) if out else default_run_dir(script)
    env = dict(os.environ, WORKBENCH_RUN_DIR=str(run_dir.resolve()), WORKBENCH_SCHEDULE=",".join(map(str, schedule)),
               WORKBENCH_STEPS_FROM=steps_from, WORKBENCH_MAX_STEPS=str(max_steps or ""),
               WORKBENCH_STOP_AFTER_PROFILE="1" if stop_after_profile else "")
    if profile_memory is not None:  # else the environment's WORKBENCH_PROFILE_MEMORY, or the default (off)
        env["WORKBENCH_PROFILE_MEMORY"] = "1" if profile_memory else "0"
    if memory_history:
        env["WORKBENCH_MEMORY_HISTORY"] = str(int(memory_history))
    if window_on_change:
        env["WORKBENCH_WINDOW_ON_CHANGE"] = str(int(window_on_change))
    if hang_timeout:
        from workbench.capture.hang_monitor import hang_env

        env.update(hang_env(run_dir, hang_timeout))
    command = command or ["workbench", "profile", *(["--nproc-per-node", str(nproc)] if nproc else []), script, *args]

    if already_a_rank():
        if n > 1:
            raise WorkbenchError("already one rank of a torchrun/srun job: drop --nproc-per-node (the launcher started the ranks)")
        # One process of a job someone else launched: capture here, rank 0 keeps the manifest.
        from workbench.capture.bootstrap import run_script
        from workbench.capture.session import dist_env

        os.environ.update(env)
        rank = dist_env()[0]
        run_dir.mkdir(parents=True, exist_ok=True)
        manifest = start_manifest(run_dir, command, n, schedule, config, capture, "external") if rank == 0 else None
        code = run_script(script, args)
        if manifest is not None:
            finish_manifest(run_dir, manifest, code, job_ended=False)
        return code, run_dir

    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = start_manifest(run_dir, command, n, schedule, config, capture, launch)
    child = [sys.executable, "-m", "workbench.capture.bootstrap", script, *args]
    if n == 1:
        if launch == "torchrun":
            env.update(single_rank_env(env))
    else:
        # torchrun's own exit code is 1 for any failure; the ranks' status files keep the real one.
        child = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n),
                 "--master-port", os.environ.get("MASTER_PORT") or str(_free_port()),
                 "-m", "workbench.capture.bootstrap", script, *args]
    # Signals stay ours until the manifest is complete: a second Ctrl-C must not leave it `running`.
    from workbench.capture.hang_monitor import HangMonitor, hung_ranks

    with ChildJob(child, env, on_usr1=lambda: _window_on_signal(run_dir),
                  on_poll=HangMonitor(run_dir) if hang_timeout else None) as job:
        code = job.wait()
        if code < 0:  # killed by a signal: report it as a shell would
            code = 128 - code
        if hung_ranks(run_dir) and not job.signum:
            print(f"workbench: {job.ended_for or 'a collective failed'}: the job was ended; each rank's stacks and last "
                  f"collectives are in {run_dir}/hang_rank*.json (workbench analyze names the collective)",
                  file=sys.stderr, flush=True)
            code = contract.HANG_EXIT_CODE
        elif not _ranks_died(run_dir):  # else the survivors' codes only say torchrun stopped them
            code = _rank_exit_code(run_dir, code)
        if job.signum:
            code = 128 + job.signum
        if job.leftovers and code == 0:
            print(f"workbench: the script left {len(job.leftovers)} process(es) running after it ended "
                  f"(pid {', '.join(map(str, job.leftovers))}): ended them", file=sys.stderr, flush=True)
        finish_manifest(run_dir, manifest, code, signum=job.signum, leftovers=job.leftovers)
    return code, run_dir


def _window_on_signal(run_dir: Path) -> None:
    """SIGUSR1 to ``workbench profile``: a window of the default steps asked of the running job."""
    from workbench.capture.window_request import request

    try:
        req = request(run_dir, 3, trigger="signal", by="SIGUSR1 to workbench profile")
        print(f"workbench: SIGUSR1: window {req['id']} asked for steps {req['first_step']}–{req['first_step'] + 2}",
              file=sys.stderr, flush=True)
    except (ValueError, OSError) as e:
        print(f"workbench: SIGUSR1: no window: {e}", file=sys.stderr, flush=True)


def _ranks_died(run_dir: Path) -> list[int]:
    """Ranks that started (env file) but never reported how they ended (no status file)."""
    reported = {f.name[len("status_rank"):-len(".json")] for f in run_dir.glob("status_rank*.json")}
    return sorted(int(f.name[len("env_rank"):-len(".json")]) for f in run_dir.glob("env_rank*.json")
                  if f.name[len("env_rank"):-len(".json")] not in reported)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
