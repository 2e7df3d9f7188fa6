#!/usr/bin/env bash
# GPU capture check + sample GPU runs, on the GPU machine (one H200), from the source tree:
#   bash benchmarks/gpu_capture.sh OUTDIR
# Runs the bundled example under `workbench profile` on CUDA: DataLoader-bound (num_workers=0),
# healthy (16 workers) and memory-heavy (device memory held near capacity). Each run directory
# is tarred into OUTDIR.
set -uo pipefail
OUT=${1:?OUTDIR}
EX=workbench/examples/slow_data_ddp.py
COMMON="--dim 4096 --batch-size 256 --steps 12 --sample-latency-ms 0.25 --sample-cost 1"
export PYTHONPATH=.:${PYTHONPATH:-}
nvidia-smi -L
python3 -c "import torch, pandas, msgspec, pynvml, psutil; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
run() {  # name, extra args
  local name=$1; shift
  python3 -m workbench profile --schedule 4,1,3 --out runs/$name $EX $COMMON "$@" 2>&1 | grep -v USDT | tail -25
  tar -cf "$OUT/$name.tar" -C runs "$name"
}
run gpu_slow_data --num-workers 0
run gpu_fixed_data --num-workers 16
# hold device memory so the step's peak reaches ~90% of the H200's 141 GiB
run gpu_memory_heavy --num-workers 16 --hold-gib 118
ls -la "$OUT"
