"""From a path to the analysed run: locate, reduce (per rank, in workers), the summary and result caches, the verdict; and compare.

``workbench.pipeline.analyze(path, Options(...))`` is the one entry (:mod:`workbench.pipeline.api`);
its ``.result`` is the typed result (:mod:`workbench.pipeline.result`, the ``--json`` schema).
"""

from workbench.pipeline.api import AnalysedRun, Extra, Options, Progress, analyze

__all__ = ["AnalysedRun", "Extra", "Options", "Progress", "analyze"]
