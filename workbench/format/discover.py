"""Which files of a directory are Kineto/Chrome traces, and which rank each one is.

Other tools name traces their own way (HTA's test data: ``rank-0.json.gz``,
``sampled_rank-1.json.gz``, ``control.json.gz``; ``export_chrome_trace("trace.json")``), so a
directory is read as a run when it holds traces under any ``*.json`` / ``*.json.gz`` name, as HTA
reads them. Which are traces:

- ``*.pt.trace.json[.gz]`` (workbench's and ``tensorboard_trace_handler``'s names) always are:
  reading them words their errors (an empty or truncated file is an error, not a skip);
- the run directory's own files (``manifest.json``, ``env_rank{r}.json``, ``status_rank{r}.json``,
  ``memory_rank{r}.json``, ``window_request.json``, ``window_rank{r}.json``, ``hang_rank{r}.json``,
  ``launch_rank{r}.json``, ``fake_step_rank{r}.json``)
  never are;
- any other ``*.json[.gz]`` is a trace when the first MiB of its text is a JSON object with a
  top-level ``traceEvents`` key, or a top-level array of Chrome trace events (``"ph"``); anything
  else (an execution trace, a config, an unreadable file) is skipped, with the reason.

:meth:`Found.note` is the one line the run's warnings carry when a directory is not named the
workbench way: which files were taken, which skipped and why. The rank of a trace comes from its
``distributedInfo``, then from its file name (``rank-3``, ``rank_3``, ``rank3``), then from the order
of the files (:func:`rank_by_order`, said in a warning).

Torch- and pandas-free: :mod:`workbench.pipeline.cache` keys a run by these files before pandas is imported.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from workbench.format.jsonscan import TOO_DEEP, object_prefix

TRACE_GLOBS = ("*.pt.trace.json.gz", "*.pt.trace.json")
"""Names that are traces by convention (workbench, tensorboard_trace_handler)."""
JSON_GLOBS = ("*.json", "*.json.gz")
RUN_FILES = ((re.compile(r"^manifest\.json$"), "the run's manifest"),
             (re.compile(r"^env_rank\d+\.json$"), "a rank's environment"),
             (re.compile(r"^status_rank\d+\.json$"), "a rank's exit status"),
             (re.compile(r"^memory_rank\d+\.json$"), "a rank's memory record"),
             (re.compile(r"^window_request\.json$"), "a request for a window"),
             (re.compile(r"^window_rank\d+\.json$"), "a rank's window record"),
             (re.compile(r"^hang_rank\d+\.json$"), "a rank's hang record"),
             (re.compile(r"^launch_rank\d+\.json$"), "a rank's launch record"),
             (re.compile(r"^fake_step_rank\d+\.json$"), "a rank's fake-tensor step"))
SNIFF_BYTES = 1 << 20  # Kineto writes its header (devices, distributedInfo) first: a few KB
MAX_NAMED = 4  # files named per list in the one-line note
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_EVENT_PH = re.compile(rb'"ph"\s*:\s*"[A-Za-z]"')
RANK_IN_NAME = re.compile(r"(?<![a-z])rank[-_]?(\d{1,9})(?!\d)", re.IGNORECASE)


@dataclass(slots=True)
class Found:
    """The files of a directory: ``taken`` (traces, sorted) and ``skipped`` (file, why)."""

    taken: list[Path] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)

    def note(self) -> str | None:
        """One line naming the files taken and skipped, for a directory not named the workbench
        way (a trace under another name, or a JSON file that is not one); None otherwise."""
        foreign = [f for f in self.taken if not _conventional(f.name)]
        odd = [(f, why) for f, why in self.skipped if _run_file(f.name) is None]
        if not foreign and not odd:
            return None
        took = f"took {len(self.taken)} trace file{'s' if len(self.taken) != 1 else ''}"
        if self.taken:
            took += ": " + _names([f.name for f in self.taken])
        return f"{took}; {self.skipped_text()}" if self.skipped else took

    def skipped_text(self) -> str:
        """``skipped 2: a.json (why), b.json (why)``."""
        return f"skipped {len(self.skipped)}: {_names([f'{f.name} ({why})' for f, why in self.skipped])}"


def _names(items: list[str]) -> str:
    more = f", and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else ""
    return ", ".join(items[:MAX_NAMED]) + more


def _conventional(name: str) -> bool:
    return name.endswith((".pt.trace.json", ".pt.trace.json.gz"))


def _run_file(name: str) -> str | None:
    return next((why for rx, why in RUN_FILES if rx.match(name)), None)


def json_files(path: Path | str) -> set[Path]:
    """The ``*.json[.gz]`` files of directory ``path`` (by name: nothing is read)."""
    files: set[Path] = set()
    for g in JSON_GLOBS:
        files.update(p for p in Path(path).glob(g) if p.is_file())
    return files


def find(path: Path | str, files: set[Path] | None = None) -> Found:
    """Sort the ``*.json[.gz]`` files of directory ``path`` (or ``files``, its :func:`json_files`)
    into traces and the rest (see the module docstring for the rule)."""
    out = Found()
    files = json_files(path) if files is None else files
    for f in sorted(files):
        why = None if _conventional(f.name) else (_run_file(f.name) or why_not_a_trace(f))
        if why is None:
            out.taken.append(f)
        else:
            out.skipped.append((f, why))
    return out


def trace_files(path: Path | str) -> list[Path]:
    """The trace files of a run directory (see :func:`find`), sorted."""
    return find(path).taken


def why_not_a_trace(path: Path) -> str | None:
    """None when the start of ``path``'s text is a Kineto/Chrome trace, else why it is not one.
    Reads only until that is clear (Kineto's header is a few KB), at most SNIFF_BYTES."""
    text = b""
    try:
        for piece, whole in _pieces(path):
            text += piece
            verdict = _verdict(text.lstrip(_SPACE), whole)
            if verdict is not _UNDECIDED:
                return verdict
    except OSError as e:
        return f"unreadable: {e.strerror or e}"
    except (zlib.error, EOFError):
        return "corrupt or truncated gzip data"
    return _verdict(text.lstrip(_SPACE), True, final=True)


_SPACE = b"\xef\xbb\xbf \t\r\n"
_UNDECIDED = object()


def _verdict(text: bytes, whole: bool, final: bool = False):
    """The verdict on the text read so far (``whole``: all of the file's), or _UNDECIDED while more
    text could change it."""
    done = whole or final or len(text) >= SNIFF_BYTES
    if not text:
        return "empty file" if done else _UNDECIDED
    if text[:1] == b"[":
        if _EVENT_PH.search(text[:65536]):
            return None
        return 'a JSON array without trace events ("ph")' if done or len(text) >= 65536 else _UNDECIDED
    if text[:1] != b"{":
        return "not JSON"
    m = _EVENTS_KEY.search(text)
    if m and (why := object_prefix(text[: m.start()])) is None:
        return None
    if m and why == TOO_DEEP:
        return f"{TOO_DEEP} before its traceEvents: not a Kineto/Chrome trace"
    if not done:
        return _UNDECIDED
    if re.search(rb'"nodes"\s*:\s*\[', text) and b'"schema"' in text:
        return "a PyTorch execution trace (nodes), not a Kineto trace"
    return f"no traceEvents{'' if whole else ' in its first MiB'}: not a Kineto/Chrome trace"


PIECE_BYTES = 64 << 10


def _pieces(path: Path, limit: int = SNIFF_BYTES):
    """The file's (decompressed) text in pieces of at most PIECE_BYTES, up to ``limit`` bytes in
    all, each with whether the file's text ends there."""
    with open(path, "rb") as f:
        data = f.read(PIECE_BYTES)
        if data[:2] != b"\x1f\x8b":
            size = 0
            while data and size < limit:
                nxt = f.read(PIECE_BYTES)
                size += len(data)
                yield data, not nxt
                data = nxt
            return
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        size = 0
        while size < limit:
            if not data:
                data = f.read(PIECE_BYTES)
                if not data:
                    raise EOFError("the gzip stream ends early")  # a truncated (or not a) gzip file
            out = d.decompress(data, PIECE_BYTES)
            data = d.unconsumed_tail
            size += len(out)
            ended = d.eof and not d.unused_data.strip(b"\0")
            if out or ended:
                yield out, ended
            if d.eof:
                return


def rank_from_name(name: str) -> int | None:
    """The rank a file name states (``rank-3.json.gz``, ``sampled_rank_3``, ``rank3.pt.trace.json``), or None."""
    m = RANK_IN_NAME.search(name)
    return int(m.group(1)) if m else None


def rank_by_order(cands: list) -> str | None:
    """Give the traces whose ``distributedInfo`` and file name state no rank the free ranks in
    file order (one per writing process: a process's profiler cycles keep one rank, and
    :func:`workbench.load.run.one_job` keeps its newest). ``cands``: workbench.load.jobs.Candidate
    (their ``rank`` is set in place, and a reduced trace's ``rank`` and breakdown too). Returns the
    warning to show, or None when nothing was ranked by order (one unranked process taking rank 0)."""
    unranked = [c for c in cands if c.trace.distributed.get("rank") is None and rank_from_name(c.trace.path.name) is None]
    if not unranked:
        return None
    taken = {c.rank for c in cands if c not in unranked}
    by_process: dict = {}
    for c in unranked:  # cands come in file order
        by_process.setdefault(c.process or ("", -1 - len(by_process)), []).append(c)
    if len(by_process) == 1 and 0 not in taken:
        return None
    free = (r for r in range(len(taken) + len(by_process) + 1) if r not in taken)
    named = []
    for group in by_process.values():
        r = next(free)
        for c in group:
            _set_rank(c, r)
            named.append(f"{c.name} → {r}")
    return f"no rank in distributedInfo or the file name of {len(unranked)} trace(s): ranked by file order: {_names(named)}"


def _set_rank(c, rank: int) -> None:
    c.rank = rank
    t = c.trace
    if hasattr(t, "breakdown"):  # a workbench.pipeline.reduce.RankSummary: its rows carry the rank
        t.rank = rank
        if "rank" in t.breakdown:
            t.breakdown = t.breakdown.assign(rank=rank)
