#!/usr/bin/env bash
# The long run's GPU checks, in one go (~4 min on one H100; the NCCL part only where 2+ GPUs are lent):
#
#   bash benchmarks/gpu_long_runs.sh OUT
#
# One GPU:
#   1. the step history on a CUDA loop that slows by 40 % from step 300 (tests/scripts/long_job.py
#      --device cuda): gpu_step_ms, the NVML columns (SM clock, temperature, throttle reasons) in
#      history_rank0.csv, the change point `workbench analyze` finds;
#   2. the history's cost on a host-bound CUDA loop, side by side with the loop alone
#      (benchmarks/history_cost.py on tests/scripts/self_timed.py --device cuda);
#   3. a window opened on the running job (workbench capture RUN --steps 3).
# Two GPUs or more (NCCL):
#   4. a rank that stalls before an all_reduce under --hang-timeout 20: the capture's watchdog dumps
#      NCCL's Flight Recorder (_dump_fr_trace / _dump_nccl_trace), collective_hang names rank 1;
#   5. the same with the job's own collective timeout 20 s and --hang-timeout 300: NCCL's watchdog
#      fires first and dumps into RUN/nccl_trace_rank_<r> (TORCH_NCCL_DUMP_ON_TIMEOUT); the same verdict.
# Writes OUT/long_runs_gpu.tar.gz (the run directories) and OUT/long_runs_gpu.log (what to check).
set -u
OUT=${1:?usage: gpu_long_runs.sh OUT}
mkdir -p "$OUT"
export PYTHONPATH=$PWD
RUNS=$(mktemp -d)
LOG="$OUT/long_runs_gpu.log"
say() { echo "== $*" | tee -a "$LOG"; }
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
say "GPUs: $GPUS; torch $(python -c 'import torch; print(torch.__version__)')"
# ruptures (the change points) may be missing on the device: analyze there only if importable
ANALYZE=1; python -c "import ruptures" 2>/dev/null || { ANALYZE=0; say "ruptures not installed: runs analysed here later"; }

say "1. history on a CUDA loop, 40 % slower from step 300"
timeout 300 python -m workbench profile --no-analyze --out "$RUNS/slowdown" tests/scripts/long_job.py --device cuda \
  --steps 600 --slow-from 300 --slowdown 0.4 --base-ms 10 2>&1 | grep -E "long_job|workbench:" | tee -a "$LOG"
head -3 "$RUNS/slowdown/history_rank0.csv" | tee -a "$LOG"
[ $ANALYZE = 1 ] && python -m workbench analyze --json "$RUNS/slowdown" | python -c "import json,sys; d=json.load(sys.stdin); print(json.dumps(d['history']['change_points']), d['history']['cost'])" | tee -a "$LOG"

say "2. the history's cost, side by side (CUDA, host-bound loop)"
timeout 600 python -m benchmarks.history_cost --rounds 3 --steps 300 --json "$OUT/history_cost_gpu.json" -- --device cuda \
  2>/dev/null | tee -a "$LOG"

say "3. a window on the running job"
python -m workbench profile --no-analyze --out "$RUNS/window" tests/scripts/long_job.py --device cuda --seconds 25 \
  --base-ms 10 > "$RUNS/window.log" 2>&1 &
JOB=$!
sleep 12
timeout 120 python -m workbench capture "$RUNS/window" --steps 3 2>&1 | tee -a "$LOG"
wait $JOB; echo "job exit $?" | tee -a "$LOG"

if [ "$GPUS" -ge 2 ]; then
  say "4. NCCL: a rank stalls at step 30, --hang-timeout 20 (the capture's watchdog)"
  START=$(date +%s)
  timeout 300 python -m workbench profile --no-analyze --nproc-per-node 2 --hang-timeout 20 --out "$RUNS/nccl_stall" \
    tests/scripts/long_job.py --device cuda --steps 60 --hang stall --hang-at 30 > "$RUNS/nccl_stall.log" 2>&1
  echo "exit $? after $(( $(date +%s) - START )) s; processes left: $(pgrep -f "$RUNS/nccl_stall" | wc -l)" | tee -a "$LOG"
  python -c "import json; d=json.load(open('$RUNS/nccl_stall/hang_rank0.json')); fr=d['flight_recorder'] or {}; print('FR', fr.get('source'), len(fr.get('entries', [])), fr.get('entries', [{}])[-1:])" | tee -a "$LOG"
  [ $ANALYZE = 1 ] && python -m workbench analyze "$RUNS/nccl_stall" 2>&1 | grep -E "collective_hang|verdict" | tee -a "$LOG"

  say "5. NCCL: the job's own timeout (20 s) fires first; --hang-timeout 300"
  START=$(date +%s)
  timeout 400 python -m workbench profile --no-analyze --nproc-per-node 2 --hang-timeout 300 --out "$RUNS/nccl_watchdog" \
    tests/scripts/long_job.py --device cuda --steps 60 --hang stall --hang-at 30 --collective-timeout 20 \
    > "$RUNS/nccl_watchdog.log" 2>&1
  echo "exit $? after $(( $(date +%s) - START )) s" | tee -a "$LOG"
  ls "$RUNS/nccl_watchdog" | tee -a "$LOG"
  [ $ANALYZE = 1 ] && python -m workbench analyze "$RUNS/nccl_watchdog" 2>&1 | grep -E "collective_hang|verdict" | tee -a "$LOG"
else
  say "4-5. NCCL hangs: left to check on 2+ GPUs (one GPU here)"
fi
tar -czf "$OUT/long_runs_gpu.tar.gz" -C "$RUNS" . 2>/dev/null
ls -la "$OUT" | tee -a "$LOG"
