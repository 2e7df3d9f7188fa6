"""What the live model object says about itself: the launch record's ``model`` block.

Read from the objects, never from a trace: every parameter's name, shape, dtype, device and the
module class that holds it; which names share one tensor (a tied embedding and output head); the
repeated blocks; the configuration the model was built from (Hugging Face's ``config``,
torchtitan's ``model_args``: the whitelisted shape keys only); the attention modules' own head
counts; ``torch.compile``; DDP, FSDP and DTensor placements. A walk over ``named_modules()`` and
``named_parameters()``: milliseconds for a few hundred parameters (its cost is the record's
``cost_ms``), bounded to :data:`MAX_PARAM_ROWS` rows.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

MAX_PARAM_ROWS = 20_000
"""Parameter rows kept (a 64-expert MoE written as one module per expert has ~5,000); beyond it the
totals stay exact and ``params_truncated`` says how many rows were left out."""
CONFIG_KEYS = frozenset({
    "hidden_size", "dim", "n_embd", "d_model", "num_hidden_layers", "n_layers", "n_layer", "num_layers",
    "num_attention_heads", "n_heads", "n_head", "num_key_value_heads", "n_kv_heads", "head_dim", "vocab_size",
    "intermediate_size", "ffn_dim", "hidden_dim", "num_experts", "num_local_experts", "n_routed_experts",
    "num_experts_per_tok", "top_k", "moe_intermediate_size", "n_shared_experts", "num_shared_experts",
    "shared_expert_intermediate_size", "tie_word_embeddings", "enable_weight_tying", "max_position_embeddings",
    "max_seq_len", "sliding_window", "qk_norm", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
    "qk_nope_head_dim", "v_head_dim", "first_k_dense_replace", "n_dense_layers", "moe_args", "model_type",
    "architectures", "use_grouped_mm", "attn_type", "torch_dtype", "dtype", "vocab", "seq_len", "moe_experts",
    "moe_top_k", "moe_shared_experts", "tie_embeddings"})
"""Configuration keys recorded (shape, experts, tying): a whitelist, so that a config holding a
tokenizer path or a secret never reaches the run directory."""
HEAD_ATTRS = ("num_heads", "n_heads", "num_attention_heads", "n_head", "num_key_value_heads", "n_kv_heads",
              "num_kv_heads", "head_dim", "n_rep", "num_key_value_groups", "top_k", "num_experts", "num_experts_per_tok",
              "n_routed_experts", "num_local_experts")
"""Integer attributes of attention and router modules recorded per class (the first instance's)."""
WRAPPERS = ("module", "_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module")
"""Attributes through which DDP, torch.compile, FSDP1 and checkpoint_wrapper hold the module they wrap."""


def qualname(obj: Any) -> str:
    t = obj if isinstance(obj, type) else type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def unwrap(model: nn.Module) -> tuple[nn.Module, list[str]]:
    """The model inside DDP / torch.compile / FSDP1 wrappers, and the wrappers' class names."""
    wrappers = []
    seen = 0
    while seen < 8:
        inner = next((getattr(model, a) for a in WRAPPERS[:3] if isinstance(getattr(model, a, None), nn.Module)), None)
        if inner is None:
            break
        wrappers.append(type(model).__name__)
        model, seen = inner, seen + 1
    return model, wrappers


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _local(t: torch.Tensor) -> torch.Tensor:
    return getattr(t, "_local_tensor", t)


def storage_key(t: torch.Tensor) -> tuple:
    """One key per storage (tied weights, views of one flat buffer share it); a tensor without
    storage (meta, some subclasses) is its own."""
    t = _local(t)
    try:
        st = t.untyped_storage()
        if st.data_ptr() != 0:
            return (st.device.type, st.data_ptr())
    except (RuntimeError, NotImplementedError):
        pass
    return ("id", id(t))


def placements(p: torch.Tensor) -> str | None:
    """A DTensor's placements and mesh shape (``Shard(0) on mesh (2,)``), else None."""
    pl = getattr(p, "placements", None)
    mesh = getattr(p, "device_mesh", None)
    if pl is None:
        return None
    shape = tuple(getattr(mesh, "shape", ()) or ())
    return f"{', '.join(str(x) for x in pl)} on mesh {shape}"


def parameters(model: nn.Module) -> dict[str, Any]:
    """The parameter table and its totals (each storage counted once)."""
    owner = {}
    for mname, m in model.named_modules(remove_duplicate=False):
        for pname, _ in m.named_parameters(recurse=False, remove_duplicate=False):
            owner.setdefault(f"{mname}.{pname}" if mname else pname, type(m).__name__)
    rows, first_name, tied = [], {}, []
    numel = numel_with_tied = nbytes = trainable = 0
    by_dtype: dict[str, int] = {}
    by_device: dict[str, int] = {}
    kinds: dict[str, int] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        key = storage_key(p)
        loc = _local(p)
        numel_with_tied += p.numel()
        if key in first_name:
            tied.append([first_name[key], name])
            tied_to = first_name[key]
        else:
            first_name[key] = name
            tied_to = None
            numel += p.numel()
            b = loc.numel() * loc.element_size()
            nbytes += b
            by_dtype[_dtype(p)] = by_dtype.get(_dtype(p), 0) + b
            dev = str(loc.device)
            by_device[dev] = by_device.get(dev, 0) + b
            trainable += p.numel() if p.requires_grad else 0
        pl = placements(p)
        kind = "DTensor" if pl is not None else "Tensor"
        kinds[kind] = kinds.get(kind, 0) + 1
        if len(rows) < MAX_PARAM_ROWS:
            row = [name, list(p.shape), _dtype(p), str(loc.device), owner.get(name, ""), bool(p.requires_grad), tied_to]
            if pl is not None:
                row.append({"placements": pl, "local_shape": list(loc.shape)})
            rows.append(row)
    buffers = sum(_local(b).numel() * _local(b).element_size() for b in model.buffers())
    grads = {}
    for p in {storage_key(p): p for p in model.parameters()}.values():
        if p.grad is not None:
            g = _local(p.grad)
            grads[_dtype(g)] = grads.get(_dtype(g), 0) + g.numel() * g.element_size()
    total_rows = sum(1 for _ in model.named_parameters(remove_duplicate=False))
    return {"param_columns": ["name", "shape", "dtype", "device", "module", "requires_grad", "tied_to"],
            "params": rows, "params_truncated": max(0, total_rows - len(rows)),
            "params_numel": numel, "params_numel_with_tied": numel_with_tied, "params_trainable_numel": trainable,
            "params_bytes": nbytes, "params_by_dtype": by_dtype, "params_by_device": by_device,
            "param_kinds": kinds, "tied": tied, "buffers_bytes": buffers,
            "grads_bytes": sum(grads.values()), "grads_by_dtype": grads}


def _bare(m: nn.Module) -> nn.Module:
    while isinstance(getattr(m, "_checkpoint_wrapped_module", None), nn.Module):
        m = m._checkpoint_wrapped_module
    if isinstance(getattr(m, "_orig_mod", None), nn.Module):
        m = m._orig_mod
    return m


def blocks(model: nn.Module) -> dict[str, Any] | None:
    """The repeated blocks: the ``ModuleList``/``ModuleDict`` holding the most parameters whose
    children (wrappers aside) are at least two of one class; None when the model has none."""
    best, best_n = None, 0
    for name, m in model.named_modules():
        if not isinstance(m, (nn.ModuleList, nn.ModuleDict)):
            continue
        kids = list(m.children())
        classes = [type(_bare(k)).__name__ for k in kids]
        if len(kids) < 2 or max(classes.count(c) for c in set(classes)) < 2:
            continue
        n = sum(p.numel() for p in m.parameters())
        if n > best_n:
            best, best_n = (name, m, classes), n
    if best is None:
        return None
    name, m, classes = best
    main = max(set(classes), key=classes.count)
    return {"path": name, "count": len(classes), "class": main, "classes": sorted(set(classes)), "params_numel": best_n}


def _plain(v: Any, depth: int = 0) -> Any:
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, torch.dtype):
        return _dtype(torch.empty(0, dtype=v))
    if isinstance(v, (list, tuple)) and depth < 2 and len(v) <= 16:
        return [_plain(x, depth + 1) for x in v]
    if dataclasses.is_dataclass(v) and not isinstance(v, type) and depth < 2:
        return {k: _plain(x, depth + 1) for k, x in _items(v).items() if k in CONFIG_KEYS}
    if isinstance(v, dict) and depth < 2:
        return {str(k): _plain(x, depth + 1) for k, x in v.items() if k in CONFIG_KEYS}
    return None


def _items(obj: Any) -> dict:
    """An object's fields: a dataclass's (slots ones too), else its ``__dict__``."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name, None) for f in dataclasses.fields(obj)}
    return dict(getattr(obj, "__dict__", {}) or {})


def config(model: nn.Module) -> dict[str, Any] | None:
    """The configuration the model holds (Hugging Face's ``config``, torchtitan's ``model_args``,
    a dataclass ``args``/``config``): its whitelisted keys (:data:`CONFIG_KEYS`)."""
    for attr in ("config", "model_args", "args", "cfg"):
        c = getattr(model, attr, None)
        if c is None or isinstance(c, (nn.Module, torch.Tensor)):
            continue
        if hasattr(c, "to_dict"):
            try:
                d = c.to_dict()
            except Exception:
                d = _items(c)
        elif dataclasses.is_dataclass(c):
            d = _items(c)
        elif isinstance(c, dict):
            d = c
        else:
            d = _items(c)
        out = {k: _plain(v) for k, v in d.items() if k in CONFIG_KEYS}
        for sub in ("text_config",):  # multimodal configs hold the language model's under a key
            if isinstance(d.get(sub), dict):
                out[sub] = {k: _plain(v) for k, v in d[sub].items() if k in CONFIG_KEYS}
        if out:
            return {"from": f"{attr} ({qualname(c)})", **out}
    return None


def module_attrs(model: nn.Module, limit: int = 32) -> dict[str, dict[str, int]]:
    """Per module class, the integer head / expert attributes of its first instance (:data:`HEAD_ATTRS`)."""
    out: dict[str, dict[str, int]] = {}
    for _, m in model.named_modules():
        cls = type(m).__name__
        if cls in out or len(out) >= limit:
            continue
        found = {a: int(getattr(m, a)) for a in HEAD_ATTRS
                 if isinstance(getattr(m, a, None), int) and not isinstance(getattr(m, a), bool)}
        if found:
            out[cls] = found
    return out


def compiled(root: nn.Module, model: nn.Module) -> dict[str, Any]:
    """torch.compile: the whole model (an ``OptimizedModule`` around it, or ``module.compile()``),
    or some of its modules (torchtitan compiles each block)."""
    inner = [n for n, m in model.named_modules() if type(m).__name__ == "OptimizedModule"
             or getattr(m, "_compiled_call_impl", None) is not None]
    whole = type(root).__name__ == "OptimizedModule" or getattr(model, "_compiled_call_impl", None) is not None
    out: dict[str, Any] = {"compiled": bool(whole or inner), "whole_model": bool(whole), "modules": len(inner)}
    try:
        import torch._functorch.config as fconfig

        budget = float(getattr(fconfig, "activation_memory_budget", 1.0))
        out["activation_memory_budget"] = budget
    except Exception:
        pass
    return out


def distributed(root: nn.Module, model: nn.Module, kinds: dict[str, int]) -> dict[str, Any]:
    """DDP, FSDP (1 and 2), DTensor parameters and the process group's size."""
    names = {type(m).__name__ for m in [root, *model.modules()]}
    fsdp2 = any(c.__name__ == "FSDPModule" for m in model.modules() for c in type(m).__mro__[1:3])
    out: dict[str, Any] = {"ddp": "DistributedDataParallel" in names, "fsdp1": "FullyShardedDataParallel" in names,
                           "fsdp2": fsdp2, "dtensor_params": kinds.get("DTensor", 0)}
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            out.update(world_size=dist.get_world_size(), backend=str(dist.get_backend()))
    except Exception:
        pass
    return out


def describe(root: nn.Module) -> dict[str, Any]:
    """The launch record's ``model`` block for ``root`` (the module the job called)."""
    model, wrappers = unwrap(root)
    params = parameters(model)
    out: dict[str, Any] = {"class": qualname(model), "wrappers": wrappers, "training": bool(model.training),
                           "modules": sum(1 for _ in model.modules())}
    out.update(params)
    out["blocks"] = blocks(model)
    out["config"] = config(model)
    out["module_attrs"] = module_attrs(model)
    out["compile"] = compiled(root, model)
    out["distributed"] = distributed(root, model, params["param_kinds"])
    return out


__all__ = ["MAX_PARAM_ROWS", "blocks", "describe", "qualname", "storage_key", "unwrap"]
