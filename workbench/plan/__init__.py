"""The planner: choose the parallel layout before launch (``workbench plan``).

A layer beside analysis: it reads runs' analyses (``--calibrate``), never the app, and imports
neither torch nor plotly. Pure functions over typed dataclasses:

    model.py      ModelSpec (dense, mixture of experts, latent attention), parameters and FLOPs
    presets.py    the models known by name, each from its published config
    hardware.py   GpuSpec (peaks via workbench.hardware.peaks), memory capacity, links per system
    layout.py     Layout (tp, pp, dp, zero, mb, recompute, sp, vpp, ep) and Stack (megatron | torch)
    memory.py     memory per GPU (ZeRO; Korthikanti et al. 2022 activations; pipeline in-flight)
    comm.py       collectives per step and their time
    timing.py     step time: compute, TP comm, bubble, exposed DP comm, optimizer, host; MFU
    search.py     the search space, ranking, why the others lost
    calibrate.py  efficiencies measured on the user's runs
    report.py     JSON (workbench.plan/1) and text
    engine_runs.py, checks.py, published.py   the checks against the engine and the literature
"""

from workbench.plan.model import ModelSpec
from workbench.plan.presets import model_spec
from workbench.plan.layout import Layout, Stack, parse_layout
from workbench.plan.search import Plan, PlanRequest, evaluate, plan
from workbench.plan.efficiency import Efficiencies

__all__ = ["Efficiencies", "Layout", "ModelSpec", "Plan", "PlanRequest", "Stack", "evaluate", "model_spec",
           "parse_layout", "plan"]
