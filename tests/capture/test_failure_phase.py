"""Where in the iteration a failure was raised, from its traceback (workbench.capture.memory)."""

import pytest

from workbench.capture.memory import failure_phase

ELASTIC = "/site/torch/distributed/elastic/multiprocessing/errors/__init__.py"  # torchrun scripts' @record
MODULE = "/site/torch/nn/modules/module.py"


def _raised_through(*files: str) -> BaseException:
    """An exception whose traceback runs through functions compiled under ``files`` (outermost first)."""
    def boom():
        raise RuntimeError("CUDA out of memory")

    fn = boom
    for name in reversed(files):
        ns = {"inner": fn}
        exec(compile("def call():\n    return inner()\n", name, "exec"), ns)
        fn = ns["call"]
    with pytest.raises(RuntimeError) as e:
        fn()
    return e.value


@pytest.mark.unit
@pytest.mark.parametrize("files, phase", [
    # torchtitan: the entry point under elastic's @record, the OOM in a block's rotary embedding
    ((ELASTIC, "/job/train.py", MODULE, "/job/model.py"), "forward"),
    ((ELASTIC, "/job/train.py", "/site/torch/autograd/graph.py"), "backward"),
    ((ELASTIC, "/job/train.py", "/site/torch/optim/adamw.py"), "optimizer"),
    # a collective called inside a module's forward (tensor parallel): the collective is where it failed
    (("/job/train.py", MODULE, "/site/torch/distributed/distributed_c10d.py"), "communication"),
    ((ELASTIC, "/job/train.py", "/job/data.py"), None),
])
def test_the_innermost_frame_that_says_decides(files, phase):
    assert failure_phase(_raised_through(*files)) == phase
