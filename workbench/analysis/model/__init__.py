"""The model behind a trace: its size, shape, experts, tokens, recomputation, layout and optimizer,
inferred from what a trace recorded with ``record_shapes=True`` holds. No I/O; a trace in, a dict out.

One module per kind of evidence, each returning candidate fields ``{value, source, confidence}``
(docs/model.md lists every field and its evidence):

- :mod:`.passes` — forward passes per step (micro-batches), from the gradients accumulated
- :mod:`.embedding` — the token table (vocab, hidden), the tokens of a pass (batch, seq)
- :mod:`.attention` — heads, head dims, KV heads, MHA/GQA/MQA/MLA and latent ranks, layers
- :mod:`.projections` — each block's output projection, MLP (ffn, gated) and the output head
- :mod:`.experts` — a mixture of experts: routed experts, top-k, shared experts, the expert width
- :mod:`.parameters` — total, embedding, tied, active per token
- :mod:`.recompute`, :mod:`.layout`, :mod:`.optimizer`
- :mod:`.conventions` — model FLOPs per token by a named convention (the headline: torchtitan's)

:func:`rank_model` (:mod:`.rank`) reconciles them for one rank; :mod:`workbench.analysis.model_run`
merges the ranks into ``workbench analyze --json``'s ``model`` block. A field the trace cannot
support is absent, never guessed.
"""

from workbench.analysis.model.context import field, rank_of, value
from workbench.analysis.model.conventions import CONVENTION, CONVENTIONS, flops_per_token
from workbench.analysis.model.rank import FIELDS, TRANSFORMER_FIELDS, rank_model
from workbench.analysis.model.recompute import FULL_MIN, RECOMPUTE_MIN

__all__ = ["CONVENTION", "CONVENTIONS", "FIELDS", "FULL_MIN", "RECOMPUTE_MIN", "TRANSFORMER_FIELDS", "field",
           "flops_per_token", "rank_model", "rank_of", "value"]
