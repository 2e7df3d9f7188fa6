"""Trainers people run, under ``workbench profile`` on CPU: PyTorch Lightning (automatic optimization:
the training step runs inside ``optimizer.step(closure)``) and Hugging Face Accelerate, each
recognised in the process with its configuration read into the run (``trainer_rank0.json``) and into
the layout; Lightning's closure is the step's work, not the optimizer's; a data-bound Lightning job's
headline stays ``dataloader_stall``. The jobs are ``benchmarks/trainers/*_job.py``."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, workbench
from workbench.pipeline.verdict import analyze_run

pytestmark = [pytest.mark.live, pytest.mark.slow]

JOBS = ROOT / "benchmarks" / "trainers"


def profile(tmp_path, script: str, *args: str):
    out = tmp_path / script.split("_")[0]
    r = workbench("profile", "--out", str(out), "--schedule", "1,1,2", str(JOBS / script), "--steps", "5", *args,
                  timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return out, json.loads((out / "trainer_rank0.json").read_text()), analyze_run(out).to_json()


def test_a_lightning_job_is_recognised_and_its_closure_is_the_steps_work(tmp_path):
    out, doc, res = profile(tmp_path, "lightning_job.py", "--accumulate", "2", "--batch", "2")
    assert doc["trainer"] == "lightning" and "lightning.pytorch.trainer.trainer.Trainer" in doc["detected_by"]
    s = doc["settings"]
    assert (s["grad_accum"], s["precision"], s["micro_batch"], s["strategy"], s["automatic_optimization"]) == \
        (2, "fp32", 2, "SingleDeviceStrategy", True)
    lay = res["model"]["fields"]["layout"]["value"]
    assert (lay["grad_accum"], lay["precision"], lay["micro_batch"], lay["zero"]) == (2, "fp32", 2, 0)
    assert res["model"]["trainer"]["name"] == "lightning" and res["model"]["trainer"]["step_base"] == 0
    # the closure's forward and backward ran inside Optimizer.step: they are the step's, not the optimizer's
    from workbench.analysis.optimizer_work import optimizer_work, own_spans
    from workbench.analysis.steps import step_windows
    from workbench.load.trace import read_trace

    t = read_trace(out / "rank0.pt.trace.json.gz")
    work, spans = optimizer_work(t, step_windows(t)), own_spans(t)
    assert work["closure"] and (spans["closure_us"] > 0).all()
    assert work["closure_ms"] > work["optimizer_ms"] > 0
    assert not any(d["id"] == "unfused_optimizer" for d in res["diagnoses"])


def test_a_data_bound_lightning_jobs_headline_stays_the_dataloader(tmp_path):
    # a small model beside a 120 ms fetch a step: the wait leads even where a loaded machine slows the compute
    _, _, res = profile(tmp_path, "lightning_job.py", "--sample-ms", "60", "--batch", "2", "--d", "64", "--seq", "64")
    assert res["verdict"].startswith("dataloader_stall"), res["verdict"]
    d = next(d for d in res["diagnoses"] if d["id"] == "dataloader_stall")
    assert "in train_dataloader()" in d["recommendation"]  # the line is Lightning's


def test_an_accelerate_job_is_recognised_with_its_accumulation(tmp_path):
    _, doc, res = profile(tmp_path, "accelerate_job.py", "--accumulate", "2")
    assert doc["trainer"] == "accelerate"
    assert (doc["settings"]["grad_accum"], doc["settings"]["precision"]) == (2, "fp32")
    lay = res["model"]["fields"]["layout"]["value"]
    assert (lay["grad_accum"], lay["precision"]) == (2, "fp32")
    assert "Accelerate's configuration" in res["model"]["fields"]["layout"]["source"]
