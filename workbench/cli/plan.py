"""``workbench plan``: registers itself as a command (workbench.cli.registry). Parses and prints; the
work is in workbench.plan. Imports nothing heavy at registration (no torch, pandas, plotly, streamlit)."""

from __future__ import annotations

import argparse
import sys

from workbench.format.jsonout import dumps  # strict JSON: no NaN/Infinity
from workbench.cli.registry import command

EXAMPLES = """examples:
  workbench plan gpt3-175b --gpus 8192 --gpu A100-SXM4-80GB --global-batch 1536
  workbench plan gpt3-175b --gpus 8192 --gpu H100 --layout tp=8,pp=16,dp=64,mb=1,recompute=selective,sp=1,vpp=2
  workbench plan L=32,h=4096,a=32,V=50304,s=4096 --gpus 64 --gpu H200 --top 10 --json > plan.json
  workbench plan llama3-70b --gpus 512 --gpu H100 --global-batch 1024 --stack torch
  workbench plan engine-370m --gpus 8 --gpu H200 --stack torch --calibrate traces/case_gpu_2_preload_shm
  workbench plan --from-run traces/case_gpu_3_batch32 --calibrate traces/case_gpu_2_preload_shm --json > p.json
  workbench compare traces/case_gpu_3_batch32 p.json          # the run against its plan
  workbench plan --from-run traces/corpus/torchtitan_8b_full_gpu   # any run: the model its traces show
  workbench plan L=32,h=4096,a=32,V=128256,s=8192,kv=8,ffn=14336,gated=1 --from-run RUN   # the model given
  workbench plan deepseek-v3-16b --gpus 8 --gpu H100 --layout tp=1,pp=1,dp=8,ep=8,zero=1   # a mixture of experts

MODEL is a preset ({presets}) or a key list L=…,h=…,a=…,V=…,s=…[,ffn=…,kv=…,hd=…,vhd=…,gated=1,
tied=1,pos=0,bias=0,norm=rms,experts=…,top_k=…,shared=…,moe_ffn=…,dense_layers=…,kv_lora=…,
rope_hd=…] (docs/plan.md). Link bandwidths are per GPU and direction in Gbit/s (NVLink 4: 3600,
one 400 Gb/s NIC per GPU: 400); defaults come from the GPU's usual system (DGX A100/H100/H200).
"""


def _examples() -> str:
    from workbench.plan.presets import PRESETS  # the one registry of model names

    return EXAMPLES.replace("{presets}", ", ".join(PRESETS))


def _arguments(p: argparse.ArgumentParser) -> None:
    # numbers are taken as text and checked by workbench.plan.validate (one line, exit 2, the same
    # checks as the app's); argparse's own type errors would print the usage block as well
    p.add_argument("model", nargs="?", help="a preset or a key list (see below); optional with --from-run")
    p.add_argument("--gpus", default=None, metavar="N", help="GPUs in the job")
    p.add_argument("--gpu", default=None, metavar="NAME", help="device: H200, H100, H100 PCIe, A100-SXM4-80GB, A100, "
                                                              "L40S, L4, A10 … (workbench.hardware.peaks)")
    p.add_argument("--gpus-per-node", default=None, metavar="N", help="GPUs sharing a node's NVLink (default 8)")
    p.add_argument("--intra-node-gbps", default=None, metavar="GBIT",
                   help="per-GPU link inside a node, Gbit/s per direction (default: the GPU's usual system)")
    p.add_argument("--inter-node-gbps", default=None, metavar="GBIT",
                   help="per-GPU network between nodes, Gbit/s per direction (default: the GPU's usual system)")
    p.add_argument("--global-batch", default=None, metavar="B",
                   help="sequences per optimizer step (default: 2^20 tokens, at least one sequence per GPU)")
    p.add_argument("--seq", default=None, metavar="S", help="sequence length (default: the model's)")
    p.add_argument("--top", default=None, metavar="K", help="layouts to show (default 5)")
    p.add_argument("--layout", default=None, metavar="SPEC",
                   help="evaluate this layout too (first in the output): comma-separated keys tp, pp, dp, zero (0-3), "
                        "mb, recompute (none, selective, op, layer:N, full; hf = full), sp (0, 1), vpp, schedule (1f1b, gpipe), e.g. "
                        "tp=8,pp=8,mb=1,recompute=selective; dp defaults to what the GPUs leave")
    p.add_argument("--calibrate", nargs="+", default=None, metavar="RUN",
                   help="workbench runs whose measured efficiencies replace the defaults (any number; one GPU is enough)")
    p.add_argument("--stack", default=None, choices=("megatron", "deepspeed", "torch"),
                   help="what runs the layout: megatron (Megatron-LM: fused kernels, vocab-parallel head; default), "
                        "deepspeed (ZeRO as its paper counts it: 16 bytes per parameter, overlapped communication) or "
                        "torch (the bundled engine / plain PyTorch: DDP, FSDP2, DTensor, torch.distributed.pipelining)")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "tf32", "fp32"), help="compute dtype (default bf16)")
    p.add_argument("--flash-attention", action="store_true", help="megatron stack: fused attention (newer Megatron-LM)")
    p.add_argument("--dp-overlap", action="store_true", help="megatron stack: gradient reduction overlaps backward")
    p.add_argument("--from-run", default=None, metavar="RUN",
                   help="plan what a run ran: an engine run's config exactly, any other run's model, layout, batch, "
                        "recomputation and dtype as inferred from its traces (MODEL replaces the model); calibrated on "
                        "the run itself unless --calibrate; prints the prediction beside what the run measured and the "
                        "best layouts on 1, 2, 4 and 8 times its GPUs; --layout defaults to the run's")
    p.add_argument("--json", action="store_true", help="print one JSON object (schema workbench.plan/1)")


@command("plan", help="choose the parallel layout before launch: memory, step time, MFU per layout",
         description="Search TP x PP (1F1B/GPipe, interleaved) x DP x ZeRO 0-3 x micro-batch x "
                     "recomputation x sequence parallel (x expert parallel for a mixture of experts) for MODEL "
                     "on N GPUs; print the fastest layouts that fit, with memory per GPU and the step time "
                     "split, and why the others lost.",
         examples=_examples(), arguments=_arguments)
def cmd_plan(args: argparse.Namespace) -> int:
    from workbench.cli.console import err, out
    from workbench.plan.report import print_plan, to_json
    from workbench.calibration.request import build_request
    from workbench.plan.search import plan

    req = build_request(model=args.model, gpus=args.gpus, gpu=args.gpu, gpus_per_node=args.gpus_per_node,
                        intra_node_gbps=args.intra_node_gbps, inter_node_gbps=args.inter_node_gbps,
                        global_batch=args.global_batch, seq=args.seq, top=args.top, layout=args.layout,
                        calibrate=args.calibrate, stack=args.stack, dtype=args.dtype,
                        flash_attention=args.flash_attention, dp_overlap=args.dp_overlap, from_run=args.from_run)
    result = plan(req)
    doc = to_json(result)
    if req.from_run is not None:
        from workbench.calibration.from_run import from_run_json

        doc["from_run"] = from_run_json(req, result)
    if args.json:
        from workbench.format.printable import printable

        for w in doc["efficiencies"]["warnings"]:  # also in the document; said where a person sees it
            print(f"workbench: warning: {printable(w, one_line=True)}", file=sys.stderr)
        sys.stdout.write(dumps(doc, indent=2))
        sys.stdout.write("\n")
        return 0
    # the plan is the result (stdout: `workbench plan … > plan.txt` keeps it); warnings are notes (stderr)
    con = out()  # a terminal's width; a file or a pipe gets whole lines
    print_plan(doc, con, notes=err())  # wrapped to the terminal, or to $COLUMNS; piped, whole lines
    return 0
