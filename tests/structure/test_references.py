"""Every file the code cites is one a reader of the repository can open: a ``*.md`` named in
``workbench/`` exists at that path (from the repository root), or, named bare, somewhere in it
(``RESULTS.md`` of a case study). A design document kept outside the repository is no citation: a
reader cannot open it."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.unit

CITED = re.compile(r"(?<![\w./-])([\w./-]+\.md)\b")


def test_every_cited_markdown_file_exists():
    present = {p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.md") if ".git" not in p.parts}
    names = {p.rsplit("/", 1)[-1] for p in present}
    missing = []
    for f in sorted((ROOT / "workbench").rglob("*.py")):
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            for cited in CITED.findall(line):
                ok = cited in present if "/" in cited else cited in names
                if not ok:
                    missing.append(f"{f.relative_to(ROOT)}:{n}: {cited}")
    assert not missing, missing
