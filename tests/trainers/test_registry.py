"""The trainer registry: every trainer renders its own line for each setting it owns, recognition
puts the outermost trainer first, and the package imports nothing heavy (every layer imports it)."""

from __future__ import annotations

import ast
import sys

import pytest

from tests.conftest import ROOT
from workbench import trainers
from workbench.trainers import deepspeed as ds

pytestmark = pytest.mark.unit

TRAINERS = ("hf_trainer", "lightning", "deepspeed", "torchtitan", "accelerate", "engine", "plain")


def test_every_trainer_is_registered_once_with_its_words():
    assert set(TRAINERS) <= set(trainers.names())
    for name in trainers.names():
        t = trainers.get(name)
        assert isinstance(t, trainers.Trainer)
        assert t.step and t.optimizer_step and t.micro_batch and t.step_base in (0, 1)
        assert set(t.config_names) <= set(trainers.SETTINGS), name
    with pytest.raises(ValueError, match="twice"):
        trainers.register(trainers.Spec(name="deepspeed", title="again"))


@pytest.mark.parametrize("trainer,setting,value,expected", [
    ("deepspeed", "zero_stage", 2, 'DeepSpeed config: "zero_optimization": {"stage": 2}'),
    ("deepspeed", "optimizer_offload", False, '"offload_optimizer": {"device": "none"}'),
    ("deepspeed", "micro_batch", 4, '"train_micro_batch_size_per_gpu": 4'),
    ("deepspeed", "grad_accum", 8, '"gradient_accumulation_steps": 8'),
    ("deepspeed", "precision", "bf16", '"bf16": {"enabled": true}'),
    ("lightning", "precision", "bf16", 'Trainer(precision="bf16-mixed")'),
    ("lightning", "grad_accum", 4, "Trainer(accumulate_grad_batches=4)"),
    ("lightning", "zero_stage", 2, 'strategy="deepspeed_stage_2"'),
    ("lightning", "num_workers", 8, "DataLoader(num_workers=8"),
    ("hf_trainer", "micro_batch", 16, "TrainingArguments(per_device_train_batch_size=16)"),
    ("hf_trainer", "recompute", "full", "TrainingArguments(gradient_checkpointing=True)"),
    ("hf_trainer", "num_workers", 4, "dataloader_num_workers=4"),
    ("hf_trainer", "fused_optimizer", True, 'optim="adamw_torch_fused"'),
    ("torchtitan", "recompute", "op", "--activation_checkpoint.mode selective --activation_checkpoint.selective_ac_option op"),
    ("torchtitan", "recompute", "layer:2", "--activation_checkpoint.mode selective --activation_checkpoint.selective_ac_option 2"),
    ("hf_trainer", "recompute", "layer:2", '"every_n_layers": 2'),
    ("torchtitan", "micro_batch", 2, "--training.local_batch_size 2"),
    ("accelerate", "precision", "fp32", 'Accelerator(mixed_precision="no")'),
    ("accelerate", "optimizer_offload", True, 'DeepSpeedPlugin(offload_optimizer_device="cpu")'),
    ("engine", "zero_stage", 3, "--set parallel.mode=zero3"),
    ("engine", "num_workers", 8, "--set data.num_workers=8"),
    ("plain", "recompute", "full", "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)"),
])
def test_the_line_is_the_trainers_own(trainer, setting, value, expected):
    assert expected in trainers.line(trainer, setting, value)


def test_a_setting_the_trainer_does_not_own_is_plain_pytorchs():
    # DeepSpeed and Accelerate do not make the DataLoader: its line is PyTorch's
    assert trainers.line("deepspeed", "num_workers", 8) == trainers.line("plain", "num_workers", 8)
    assert trainers.line("accelerate", "recompute", "full") == trainers.line(None, "recompute", "full")
    assert trainers.line("no-such-trainer", "micro_batch", 2) == "DataLoader(dataset, batch_size=2)"
    with pytest.raises(KeyError):
        trainers.line("deepspeed", "stage", 2)


def test_detection_puts_the_outermost_trainer_first():
    # Hugging Face's Trainer runs on Accelerate (and DeepSpeed): its object says it is the trainer
    assert trainers.detect_process(["transformers.trainer", "accelerate", "deepspeed"],
                                   ["transformers.trainer.Trainer", "deepspeed.runtime.engine.DeepSpeedEngine"]) == \
        ["hf_trainer", "deepspeed"]
    assert trainers.detect_process(["lightning.pytorch", "deepspeed"])[0] == "lightning"
    assert trainers.detect_process(["deepspeed"], ["deepspeed.runtime.engine.DeepSpeedEngine"]) == ["deepspeed"]
    # a module alone is not a trainer running where a live object names another
    assert trainers.detect_process(["accelerate", "lightning.pytorch"], ["lightning.pytorch.trainer.trainer.Trainer"]) == \
        ["lightning"]
    assert trainers.detect_process(["torch", "numpy"]) == []


def test_detection_from_a_trace():
    assert trainers.detect_trace(["aten::mm", "PreBackwardFunctionForModule",
                                  "autograd::engine::evaluate_function: PostBackwardFunctionModuleBackward"]) == ["deepspeed"]
    assert trainers.detect_trace(["Optimizer.step#OptimizersContainer.step"]) == ["torchtitan"]
    assert trainers.detect_trace(["Optimizer.step#AdamW.step", "aten::linear"]) == []


def test_deepspeed_config_settings():
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True}},
           "zero_allow_untested_optimizer": True}
    assert ds.config_settings(cfg) == {"zero_stage": 3, "optimizer_offload": True, "param_offload": False,
                                       "micro_batch": 2, "grad_accum": 4, "precision": "bf16"}
    plain = ds.config_settings({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none"}}})
    assert plain == {"zero_stage": 2, "optimizer_offload": False, "param_offload": False, "precision": "fp32"}
    # Hugging Face's "auto" values are the Trainer's to fill in: no precision is read from them
    assert "precision" not in ds.config_settings({"bf16": {"enabled": "auto"}})


def test_live_readers_read_attributes_only():
    class Args:
        per_device_train_batch_size, gradient_accumulation_steps, dataloader_num_workers = 8, 2, 0
        gradient_checkpointing, bf16, fp16, optim, fsdp = True, True, False, "adamw_torch_fused", ["full_shard", "offload"]

    class HF:
        args = Args()

    got = trainers.get("hf_trainer").read_config(HF())
    assert got == {"micro_batch": 8, "grad_accum": 2, "num_workers": 0, "recompute": "full", "precision": "bf16",
                   "optimizer": "adamw_torch_fused", "zero_stage": 3, "param_offload": True, "optimizer_offload": True,
                   "backend": "fsdp"}
    assert trainers.get("plain").read_config(object()) == {}


def test_precision_words():
    assert [trainers.precision_of(v) for v in ("bf16-mixed", "16-mixed", "32-true", "torch.bfloat16", "fp16", "no", None)] == \
        ["bf16", "fp16", "fp32", "bf16", "fp16", "fp32", None]


def test_the_package_imports_nothing_heavy():
    allowed = {"__future__", "json", "re", "dataclasses", "typing"}
    for f in (ROOT / "workbench" / "trainers").glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [node.module or ""]
            else:
                continue
            for m in mods:
                assert m.split(".")[0] in allowed or m.startswith("workbench.trainers"), f"{f.name} imports {m}"
    assert "workbench.trainers" in sys.modules
