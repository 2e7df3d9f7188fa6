"""``workbench plan --from-run RUN`` for any run: the planner's inputs from what the analysis
inferred about the run's model (``workbench analyze --json``'s ``model`` block)."""

from __future__ import annotations


def inferred_fields(doc: dict) -> dict:
    """``{name: value}`` of the analysis' inferred model (``doc["model"]["fields"]``), the fields
    with a value only; {} when the analysis inferred none (or predates the block)."""
    model = doc.get("model") if isinstance(doc, dict) else None
    fields = model.get("fields") if isinstance(model, dict) else None
    if not isinstance(fields, dict):
        return {}
    return {k: f["value"] for k, f in fields.items() if isinstance(f, dict) and f.get("value") is not None}
