"""Benchmarks: scripts that measure workbench, run from the repository root as modules
(``python -m benchmarks.scale big``), with two shared helpers:

- :mod:`benchmarks.measure`: a whole process tree timed by wall clock and CPU, its memory summed
  over every process (a worker pool is not one worker);
- :mod:`benchmarks.synthetic`: big traces and runs built from committed ones (replicated steps,
  minified layout, many ranks).

Results go to BENCHMARKS.md (and ``benchmarks/results/``); no data is written to the repository.
"""
