#!/usr/bin/env bash
# Trainers people run, on one GPU, under `workbench profile`: PyTorch Lightning (bf16 and fp32, its
# automatic optimization's closure inside optimizer.step; one job data-bound) and DeepSpeed ZeRO-3 on
# one GPU with and without the optimizer offloaded to the CPU; then the fixes the verdicts name,
# measured (the data-bound job with DataLoader workers; ZeRO stage 2 for the one-GPU ZeRO-3). The jobs
# are benchmarks/trainers/{lightning_job,ds_zero}.py: a 12-layer GPT, d 1024, seq 1024, vocab 32768.
# About 5 minutes on one H100. Carry the wheels DeepSpeed needs there (built here: DeepSpeed 0.19.8
# with DS_BUILD_OPS=0, hjson, pydantic, pydantic-core, annotated-types, typing-inspection,
# typing-extensions, einops, msgpack, py-cpuinfo, ninja, msgspec for the verdicts; cp312):
#
#   run(command="bash benchmarks/gpu_trainers.sh $OUT", carry=[".whl"])
#
# $OUT gets trainers_lightning.tar.gz, trainers_deepspeed.tar.gz (the run directories), log.txt (every
# job's output and verdict) and gpu.txt. Check in log.txt: Lightning's verdicts name no
# unfused_optimizer larger than the optimizer's own kernels and the data-bound one is dataloader_stall;
# DeepSpeed's layout reads ZeRO-3 (+ optimizer offloaded), no recomputation, offload_optimizer_step and
# sharding_nothing with DeepSpeed config lines; the fixes' steps against the baselines' (summary lines); the
# host's own AdamW step (cpu_adam's `host:` line) against ds_z3_offload's Optimizer.step ranges (432-457 ms on the first run).
set -uo pipefail
OUT=${1:?OUT}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 DS_BUILD_OPS=0
mkdir -p "$OUT" /tmp/trainers
[ -d .whl ] && python -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt"
python -c "import torch, lightning, deepspeed; print('torch', torch.__version__, 'lightning', lightning.__version__, \
'deepspeed', deepspeed.__version__)" >> "$OUT/gpu.txt" 2>&1
LOG="$OUT/log.txt"
MODEL=(--d 1024 --layers 12 --heads 16 --seq 1024 --vocab 32768)

job() {  # NAME TIMEOUT [PROFILE OPTIONS] SCRIPT ARGS... : one profiled run, its output and verdict in the log
  local name=$1 limit=$2; shift 2
  echo "=== $name: $*" >> "$LOG"
  local t0=$SECONDS
  timeout "$limit" python -m workbench profile --out "/tmp/trainers/$name" "$@" >> "$LOG" 2>&1
  echo "=== $name: exit $? in $((SECONDS - t0)) s" >> "$LOG"
}

# Lightning as `python script.py` runs it (no torchrun variables); DeepSpeed reads torchrun's (--nproc-per-node 1)
job pl_bf16 90 benchmarks/trainers/lightning_job.py --precision bf16-mixed --batch 8 --steps 14 "${MODEL[@]}"
job pl_fp32 90 benchmarks/trainers/lightning_job.py --precision 32-true --batch 8 --steps 14 "${MODEL[@]}"
job pl_data 90 benchmarks/trainers/lightning_job.py --precision bf16-mixed --batch 8 --steps 14 --sample-ms 25 "${MODEL[@]}"
job pl_data_workers 90 benchmarks/trainers/lightning_job.py --precision bf16-mixed --batch 8 --steps 14 --sample-ms 25 \
    --num-workers 8 "${MODEL[@]}"
# DeepSpeed ZeRO-3 on one GPU (the seed article's example: stage 3, optimizer offloaded), then stage 2
job ds_z3 120 --nproc-per-node 1 benchmarks/trainers/ds_zero.py --stage 3 --bf16 --micro-batch 8 --steps 14 "${MODEL[@]}"
job ds_z3_offload 150 --nproc-per-node 1 benchmarks/trainers/ds_zero.py --stage 3 --offload-optimizer --bf16 --micro-batch 8 --steps 14 "${MODEL[@]}"
job ds_z2 120 --nproc-per-node 1 benchmarks/trainers/ds_zero.py --stage 2 --bf16 --micro-batch 8 --steps 14 "${MODEL[@]}"

# the offloaded run's CPU optimizer step timed on this host alone (no GPU, no profiler) and under the profiler
echo "=== cpu_adam: benchmarks/trainers/cpu_adam.py --params 218265600 --steps 5" >> "$LOG"
timeout 120 python benchmarks/trainers/cpu_adam.py --params 218265600 --steps 5 >> "$LOG" 2>&1

grep -E "^(host|trace): |^=== |^verdict|^(CRITICAL|WARNING|INFO) |^model:|^note: the profiled" "$LOG" > "$OUT/summary.txt"
cd /tmp/trainers && tar czf "$OUT/trainers_lightning.tar.gz" pl_* && tar czf "$OUT/trainers_deepspeed.tar.gz" ds_*
ls -la "$OUT" >> "$LOG"
