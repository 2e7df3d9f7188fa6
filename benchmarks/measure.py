"""One way to time a benchmark: a whole process tree, by wall clock, with its memory summed over
every process (a worker pool is not one worker), the machine's load alongside.

GNU ``time``'s "maximum resident set size" is ``ru_maxrss`` of ``wait4``: the largest *single*
process of the tree (checked: a 100 MB parent with two 300 MB children at once reads 315 MB; the
sampler here, 760 MB), so a worker pool would look as small as one worker. :func:`measure` samples
the RSS of the process *and all its descendants* every 50 ms and their PSS every 0.5 s. RSS summed
over processes counts pages they share (the interpreter, pages a forked child has not written) once
per process: an upper bound. PSS splits shared pages between the processes that map them: the fair
total. Both are reported; ``max_proc_rss`` is GNU time's number, ``cpu_s`` the tree's CPU time.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_S = 0.05  # RSS period: a 50 ms spike can be missed, not a worker's lifetime
# PSS reads /proc/PID/smaps_rollup, which walks the page tables under the process's mmap lock:
# ~5 ms for a 3 GB process, ~17 ms for HTA's 3 processes on 8 ranks, and HTA's 12 GB tree on 256
# ranks took the sampler 277 CPU-s in 1,005 s at a fixed 0.5 s. So PSS is read at most every
# 0.5 s and at least PSS_COST_RATIO × its own cost apart (≤ 2 % of a core; the JSON's
# sampler_cpu_s says what the sampler cost). The tree and its RSS (statm) cost ~0.3 ms a sample.
PSS_EVERY_S = 0.5
PSS_COST_RATIO = 50


def _pss(pid: int) -> int:
    """Proportional set size (bytes) from /proc/PID/smaps_rollup; 0 when unreadable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


PAGE = os.sysconf("SC_PAGE_SIZE")


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from /proc/PID/task/TID/children (a few reads; psutil's
    ``children()`` scans every process of the machine, ~7 ms a call)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return out


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def measure(cmd: list[str], *, timeout_s: float | None = None, mem_cap: int | None = None,
            as_limit: int | None = None, stdout_path: Path | None = None, stderr_path: Path | None = None,
            env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``cmd`` in its own session and measure it as a tree.

    Returns wall_s, cpu_s (user + system of the process and the children it waited for),
    peak_rss (sum over the tree, every 50 ms; at least GNU time's number), tree_rss (that sum alone),
    peak_pss (sum, ≥ 0.5 s apart; None with fewer than 3 samples, as for a sub-second process),
    max_proc_rss (largest single process: GNU time's number), max_procs, rc and status: ``ok``,
    ``failed`` (non-zero exit), ``timeout``
    (killed after ``timeout_s``) or ``memory cap`` (killed when the tree's RSS passed
    ``mem_cap``). ``as_limit`` sets RLIMIT_AS (address space, bytes) on every process of the tree,
    as ``prlimit --as`` would, so an allocation past it fails inside the tool (MemoryError).
    stdout goes to ``stdout_path`` (or is discarded); stderr's last 2,000 characters are kept (all of
    it in ``stderr_path``). The command runs in the repository with it first on PYTHONPATH, plus
    ``env``, and without WORKBENCH_CACHE_DIR (analysis caches go next to the run, where a cold
    run deletes them).
    """
    out_f = open(stdout_path, "wb") if stdout_path else open(os.devnull, "wb")
    err_f = open(stderr_path, "w+b") if stderr_path else tempfile.TemporaryFile()

    def limit() -> None:
        if as_limit:
            resource.setrlimit(resource.RLIMIT_AS, (as_limit, as_limit))

    env = dict(os.environ, **(env or {}), PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("WORKBENCH_CACHE_DIR", None)
    load = os.getloadavg()[0]  # other jobs on a shared machine skew the wall time: say how busy it was
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, cwd=ROOT, env=env, start_new_session=True,
                            preexec_fn=limit if as_limit else None)
    peak = {"rss": 0, "pss": 0, "pss_n": 0, "procs": 0, "cpu_s": 0.0}
    killed: list[str] = []
    done = threading.Event()

    def sample() -> None:
        next_pss = 0.0
        while not done.is_set():
            tree = _tree(proc.pid)
            rss = sum(_rss(p) for p in tree)
            if time.perf_counter() >= next_pss:
                c0 = time.thread_time()
                peak["pss"] = max(peak["pss"], sum(_pss(p) for p in tree))
                peak["pss_n"] += 1
                next_pss = time.perf_counter() + max(PSS_EVERY_S, PSS_COST_RATIO * (time.thread_time() - c0))
            peak["rss"] = max(peak["rss"], rss)
            peak["procs"] = max(peak["procs"], len(tree))
            peak["cpu_s"] = time.thread_time()
            why = ("timeout" if timeout_s and time.perf_counter() - t0 > timeout_s
                   else "memory cap" if mem_cap and rss > mem_cap else None)
            if why and not killed:
                killed.append(why)
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            done.wait(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    sampler.join()
    try:  # workers the tool left behind would otherwise outlive the measurement
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    out_f.close()
    err_f.seek(0)
    err = err_f.read().decode(errors="replace")[-2000:]
    err_f.close()
    status_word = killed[0] if killed else ("ok" if proc.returncode == 0 else "failed")
    # a process shorter than a few samples can peak between them: the largest process (wait4) bounds
    # the tree's sum from below. ru_maxrss survives fork and exec: a command started from a big
    # process reads at least that process's size there (tree_rss, the samples alone, does not)
    return {"wall_s": round(wall, 3), "peak_rss": max(peak["rss"], ru.ru_maxrss * 1024), "tree_rss": peak["rss"],
            "peak_pss": peak["pss"] if peak["pss_n"] >= 3 else None, "pss_samples": peak["pss_n"],
            "max_proc_rss": ru.ru_maxrss * 1024, "max_procs": max(peak["procs"], 1),
            "sampler_cpu_s": round(peak["cpu_s"], 2), "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
            "rc": proc.returncode, "status": status_word,
            "load_avg_1m": round(load, 2), "code": code_stamp(),
            "stderr_tail": err.strip().splitlines()[-1] if err.strip() else ""}


def code_stamp() -> str:
    """HEAD and a digest of uncommitted changes under workbench/: other sessions commit while a
    long run goes on, and a table must not mix versions unawares."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
        diff = subprocess.run(["git", "diff", "HEAD", "--", "workbench"], capture_output=True, cwd=ROOT).stdout
    except OSError:
        return "?"
    return head + (f"+{zlib.crc32(diff):08x}" if diff else "")


class Failed(Exception):
    """A measured command that did not exit 0 (its status and the end of its stderr)."""


def measure_ok(cmd: list[str], **kw) -> tuple[dict[str, Any], str]:
    """:func:`measure` of a command that must succeed: (the measurement, its stdout)."""
    with tempfile.NamedTemporaryFile("r", suffix=".out") as out:
        m = measure(cmd, stdout_path=Path(out.name), **kw)
        if m["status"] != "ok":
            raise Failed(f"{' '.join(map(str, cmd[:4]))}… {m['status']} (exit {m['rc']}): {m['stderr_tail']}")
        return m, Path(out.name).read_text()
