"""The planner's inputs from flags or widgets: model, cluster, batch, stack, efficiencies, layout."""

from __future__ import annotations


def build_request(*, model: str | None = None, gpus: int | None = None, gpu: str | None = None, gpus_per_node: int = 8,
                  intra_node_gbps: float | None = None, inter_node_gbps: float | None = None,
                  global_batch: int | None = None, seq: int | None = None, top: int = 5, layout: str | None = None,
                  calibrate: list | None = None, stack: str | None = None, dtype: str = "bf16",
                  flash_attention: bool = False, dp_overlap: bool = False, from_run: str | None = None):
    """The PlanRequest that ``workbench plan``'s flags (and the app's Plan page) describe."""
    from workbench.format.errors import WorkbenchError
    from workbench.hardware.systems import make_cluster
    from workbench.plan.layout import fill_dp, parse_layout
    from workbench.plan.presets import model_spec
    from workbench.plan.search import PlanRequest
    from workbench.plan.efficiency import Efficiencies

    from workbench.plan.validate import flag, gbps
    from workbench.calibration.from_run import run_job
    from workbench.plan.recompute import modes_for

    gpus, gpus_per_node, global_batch, seq, top = (flag(n, v) for n, v in (
        ("--gpus", gpus), ("--gpus-per-node", gpus_per_node), ("--global-batch", global_batch), ("--seq", seq),
        ("--top", top)))
    intra_node_gbps, inter_node_gbps = gbps("--intra-node-gbps", intra_node_gbps), gbps("--inter-node-gbps", inter_node_gbps)
    job = run_job(from_run, model=model, global_batch=global_batch) if from_run else None
    if job is None and not model:
        raise WorkbenchError("plan: give MODEL (a preset or a key list) or --from-run RUN")
    spec = (model_spec(model) if model else job.model).with_seq(seq)
    gpus = gpus if gpus is not None else (job.gpus if job else None)
    gpu = gpu or (job.device_name if job else None)
    missing = [f for f, v in (("--gpus N", gpus), ("--gpu NAME", gpu)) if not v]
    if missing:
        raise WorkbenchError(f"plan: {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} needed"
                             + (" (a run on CPU names no GPU)" if job else ""))
    cluster = make_cluster(gpu, gpus, 8 if gpus_per_node is None else gpus_per_node, intra_node_gbps, inter_node_gbps)
    batch = global_batch if global_batch is not None else (
        job.global_batch if job else max(gpus, (1 << 20) // spec.seq))
    eff = Efficiencies()
    if calibrate:
        from workbench.calibration.calibrate import calibrate as measure

        eff = measure(calibrate)
    elif job is not None and job.device == "cuda":
        eff = _self_calibrated(job)
    stack = stack or ("torch" if job else "megatron")
    dtype = job.stack.dtype if (job and dtype == "bf16") else dtype
    given = None
    if layout:
        given = fill_dp(parse_layout(layout), gpus, explicit_dp="dp=" in layout.replace(" ", ""))
    elif job:
        given = job.layout
    # with --from-run, the run's own layout is evaluated with its exact stack (autocast or FSDP2,
    # DDP buckets, optimizer) unless another stack was asked for
    run_stack = job.stack if (job and given == job.layout and stack == "torch") else None
    return PlanRequest(model=spec, cluster=cluster, global_batch=batch, stack=stack, dtype=dtype, efficiencies=eff,
                       top=5 if top is None else top, layout=given, flash_attention=flash_attention or None,
                       dp_overlap=dp_overlap or None, run_stack=run_stack,
                       from_run=None if job is None else job.describe(), run_job=job,
                       zero_at_dp1=None if job is None else job.layout.zero,
                       recompute_modes=None if job is None else modes_for(job.trainer, job.layout.recompute))


def _self_calibrated(job):
    """Efficiencies measured on the run itself (``--from-run`` without ``--calibrate``); the
    defaults, saying why, where the run has nothing to measure."""
    from dataclasses import replace

    from workbench.format.errors import WorkbenchError
    from workbench.calibration.calibrate import calibrate
    from workbench.plan.efficiency import Efficiencies

    try:
        return calibrate([job.path], results={job.path: job.result} if job.result else None)
    except WorkbenchError as e:
        return replace(Efficiencies(), notes=(f"calibration on the run failed ({e}): stated defaults",))
