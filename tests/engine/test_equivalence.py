"""Same seed, same data: every parallel layout gives the single-process losses (real gloo ranks).

Data-parallel layouts split a batch of 8 into 2 x 4 (the sampler interleaves ranks, so the union
is the reference batch); TP and PP see the whole batch on every rank, DP x PP half of it per pipeline. Tolerances: 1e-5 relative
for DDP / ZeRO-1/2/3 (only the all-reduce's summation order differs), 1e-4 for TP and PP (matmuls
split along the reduction dimension and summed across ranks round differently).

The runs of one rank count are trained in turn by one job (tests/scripts/engine_rounds.py): torch
starts once per rank instead of once per run. One layout also runs through `workbench train` on its
own and must print the same numbers as its run in the shared job. (The 3-D layout on 8 ranks:
test_layout_3d.py.)
"""

from __future__ import annotations

import re

import pytest

from tests.engine.conftest import failure, losses, train, train_rounds

pytestmark = [pytest.mark.slow, pytest.mark.live]
STEPS = 5
_NORM = re.compile(r"^step (\d+) loss \S+ grad_norm (\S+)", re.M)
SGD = ("train.optimizer=sgd", "train.lr=0.5", "train.grad_clip=0.3")  # clipping active on every step
DP_PP = ("parallel.pp=2", "data.batch_size=4", "parallel.microbatches=2")

# Every run of this file: name -> (ranks, config, *overrides). The runs of one rank count are
# trained in turn by one job (tests/engine/conftest.py's train_rounds): each is a whole engine run
# of its own (fresh config, model, optimizer, loader, process group), only the processes are shared.
RUNS = {
    "single_dp": (1, "ddp_tiny.toml", "parallel.mode=single", "data.batch_size=8"),
    "single_tp": (1, "tp_tiny.toml", "parallel.mode=single"),
    "single_tp_b8": (1, "tp_tiny.toml", "parallel.mode=single", "data.batch_size=8"),
    "single_pp": (1, "pp_tiny.toml", "parallel.mode=single"),
    "single_pp_sgd": (1, "pp_tiny.toml", "parallel.mode=single", *SGD),
    **{f"single_moe_{skew}": (1, "moe_tiny.toml", "parallel.mode=single", "parallel.ep=1", "data.batch_size=8",
                              f"faults.skewed_routing={skew}") for skew in ("0.0", "1.0")},
    **{f"recompute_{mode}": (1, "ddp_tiny.toml", "parallel.mode=single", "data.batch_size=8", f"train.recompute={mode}")
       for mode in ("selective", "full")},
    **{mode: (2, "ddp_tiny.toml", f"parallel.mode={mode}", "parallel.mixed_precision=fp32")
       for mode in ("ddp", "zero1", "zero2", "zero3")},
    "tp": (2, "tp_tiny.toml"),
    **{schedule: (2, "pp_tiny.toml", f"parallel.pp_schedule={schedule}") for schedule in ("gpipe", "1f1b")},
    **{f"hook_{hook}": (2, "ddp_tiny.toml", f"parallel.comm_hook={hook}") for hook in ("bf16", "topk", "sign")},
    **{f"moe_{skew}": (2, "moe_tiny.toml", f"faults.skewed_routing={skew}") for skew in ("0.0", "1.0")},
    "dp_pp": (4, "pp_tiny.toml", *DP_PP),
    "dp_pp_sgd": (4, "pp_tiny.toml", *DP_PP, *SGD),
    "dp_tp": (4, "tp_tiny.toml", "parallel.dp=2", "parallel.tp=2"),
}


@pytest.fixture(scope="module")
def runs():
    """name -> (losses, grad norms) of each step, from rank 0's log lines; the first name asked for
    of a rank count trains every run of that count (one job)."""
    done: dict[int, tuple] = {}

    def get(name: str):
        nproc = RUNS[name][0]
        if nproc not in done:
            names = [n for n, spec in RUNS.items() if spec[0] == nproc]
            r, logs = train_rounds([(*RUNS[n][1:], f"train.steps={STEPS}") for n in names], nproc=nproc)
            done[nproc] = r, dict(zip(names, logs))
        r, logs = done[nproc]
        log = logs[name]
        got = losses(log)
        assert sorted(got) == list(range(STEPS)), f"run {name}:\n{log}\n{failure(r)}"
        norms = {int(s): float(v) for s, v in _NORM.findall(log)}
        return [got[s] for s in range(STEPS)], [norms[s] for s in range(STEPS)]

    return get


@pytest.fixture(scope="module")
def reference(runs):
    return {"dp": runs("single_dp")[0], "tp": runs("single_tp")[0], "pp": runs("single_pp")}


def test_workbench_train_gives_the_losses_of_the_shared_job(runs):
    # `workbench train --nproc-per-node 2` (the CLI, torchrun, one run per job) against the same
    # layout as a run of the shared job: the same losses and grad norms to the last printed digit
    r = train("ddp_tiny.toml", *RUNS["ddp"][2:], f"train.steps={STEPS}", nproc=2)
    assert r.returncode == 0, failure(r)
    got = losses(r.stdout)
    norms = {int(s): float(v) for s, v in _NORM.findall(r.stdout)}
    assert ([got[s] for s in range(STEPS)], [norms[s] for s in range(STEPS)]) == runs("ddp")


def _close(got, want, rel):
    assert got == pytest.approx(want, rel=rel), f"{got} vs {want}"
    assert len(set(want)) > 1  # the losses move: the comparison is not of constants


@pytest.mark.parametrize("mode", ["ddp", "zero1", "zero2", "zero3"])
def test_data_parallel_losses_match_single_process(runs, reference, mode):
    _close(runs(mode)[0], reference["dp"], 1e-5)


def test_tensor_parallel_losses_match_single_process(runs, reference):
    _close(runs("tp")[0], reference["tp"], 1e-4)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_losses_match_single_process(runs, reference, schedule):
    _close(runs(schedule)[0], reference["pp"][0], 1e-4)


def test_dp_by_pp_on_four_ranks(runs, reference):
    # dp=2 x pp=2 from one (dp, pp) mesh, each stage FSDP2-sharded over its dp pair: each pipeline
    # gets half of the reference batch of 8 (4 samples in 2 micro-batches), its two stages the same
    # half. The logged grad norm is the global one (both stages, both dp shards): it must equal the
    # single process's, whose every gradient entry lives on one rank (clipping scales by it).
    want_loss, want_norm = reference["pp"]
    got_loss, got_norm = runs("dp_pp")
    _close(got_loss, want_loss, 1e-4)
    assert got_norm == pytest.approx(want_norm, rel=1e-4), f"{got_norm} vs {want_norm}"


def test_dp_by_pp_clips_by_the_global_grad_norm(runs):
    # AdamW hardly notices a wrong clipping factor (it normalizes the update): SGD at lr 0.5 with
    # grad_clip 0.3, below every step's norm, makes each step's update proportional to the factor,
    # so a norm missing a stage's or a dp shard's share would change the losses
    want_loss, want_norm = runs("single_pp_sgd")
    assert min(want_norm) > 0.3  # clipping is active on every step
    got_loss, got_norm = runs("dp_pp_sgd")
    _close(got_loss, want_loss, 1e-4)
    assert got_norm == pytest.approx(want_norm, rel=1e-4), f"{got_norm} vs {want_norm}"


def test_2d_fsdp_by_tp_on_four_ranks(runs):
    # dp=2 x tp=2: each data-parallel pair sees half of the batch of 8; the reference saw all of it.
    # The grad norm checks the sum over FSDP2's _StridedShard dp placement of TP weights (once missed)
    ref, ref_norm = runs("single_tp_b8")
    got, got_norm = runs("dp_tp")
    _close(got, ref, 1e-4)
    assert got_norm == pytest.approx(ref_norm, rel=1e-4), f"{got_norm} vs {ref_norm}"


@pytest.mark.parametrize("hook", ["bf16", "topk", "sign"])
def test_compression_hooks_train(runs, reference, hook):
    # bf16 rounds the all-reduced gradient (~3 significant digits); top-k and sign change the
    # update itself (error feedback makes up for it over steps), so only the first loss is exact
    got = runs(f"hook_{hook}")[0]
    assert got[0] == pytest.approx(reference["dp"][0], rel=1e-6)
    if hook == "bf16":
        _close(got, reference["dp"], 1e-3)
    else:
        assert got != reference["dp"] and all(abs(v - 5.55) < 0.1 for v in got)


@pytest.mark.parametrize("mode", ["selective", "full"])
def test_recomputation_keeps_the_losses(runs, reference, mode):
    # recomputation re-runs the same ops in backward: bit-for-bit the same math on CPU
    _close(runs(f"recompute_{mode}")[0], reference["dp"], 1e-6)


def test_expert_parallel_losses_match_single_process(runs):
    # 8 experts over ep = 2 ranks (4 each): token copies cross ranks by all_to_all_single both ways,
    # expert gradients come back the same way and DDP leaves them alone; each rank gets half the
    # batch of 8. The skewed router keeps the dispatch uneven (expert 0 on rank 0 gets every token).
    # (That the ranks really exchange tokens: the committed run's trace, tests/diagnose/test_expert_imbalance.py.)
    for skew in ("0.0", "1.0"):
        want_loss, want_norm = runs(f"single_moe_{skew}")
        got_loss, got_norm = runs(f"moe_{skew}")
        _close(got_loss, want_loss, 1e-5)
        assert got_norm == pytest.approx(want_norm, rel=1e-5), f"{got_norm} vs {want_norm}"
