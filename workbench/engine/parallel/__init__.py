"""One module per parallelism, one ``apply_*`` function each; :func:`parallelize` composes them."""

from workbench.engine.parallel.compose import Parallelized, parallelize

__all__ = ["Parallelized", "parallelize"]
