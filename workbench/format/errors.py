"""Errors users see: one line that says what is wrong and what to do."""

from __future__ import annotations


class WorkbenchError(Exception):
    """A problem with the user's input or environment, reported as one line (CLI exit 2)."""


class TraceError(WorkbenchError):
    """A trace file that cannot be used: names the file and what is wrong with it."""

    def __init__(self, path: object, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem
