#!/usr/bin/env bash
# Every variant of tests/scripts/gpu_efficiency.py under `workbench profile`, one H200, then all run
# directories packed into OUTDIR/eff_traces.tar.gz (split into <= 15 MB parts if larger, since
# at most 8 files of 16 MB come back from the device). Unpack into tests/analysis/data/:
#     cat eff_traces.tar.gz* | tar -xz -C tests/analysis/data
#
#     bash tests/scripts/gpu_efficiency.sh "$OUT"        # ~5 min on one H200 (17 runs; the compile one ~1 min)
#
# Names: eff_<model>_<problem>; each problem's fixed twin is named in the comment of its line.
set -u
OUTDIR=${1:?usage: gpu_efficiency.sh OUTDIR}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUTDIR"
if ! python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_efficiency.sh: needs a CUDA GPU (torch.cuda.is_available() is False)" >&2
    exit 1
fi
RUNS=$(mktemp -d)
LOG="$OUTDIR/gpu_efficiency.log"
: >"$LOG"
failed=0

variant() {  # NAME ARGS...: one profiled run, at most 120 s (SIGINT: workbench profile then ends its child and keeps the traces), output appended to the log
    local name=$1
    shift
    local t0=$SECONDS
    echo "=== $name: $*" >>"$LOG"
    if timeout -s INT -k 20 120 python -m workbench profile --stop-after-profile --no-analyze --out "$RUNS/$name" \
        "$REPO/tests/scripts/gpu_efficiency.py" "$@" >>"$LOG" 2>&1; then
        echo "=== $name ok in $((SECONDS - t0)) s" | tee -a "$LOG"
    else
        echo "=== $name FAILED (rc $?) after $((SECONDS - t0)) s" | tee -a "$LOG"
        failed=$((failed + 1))
    fi
}

variant eff_gpt_bf16 --model gpt --dtype bf16 --optimizer fused --attention sdpa  # the healthy twin of most
variant eff_gpt_fp32_notf32 --model gpt --dtype fp32 --tf32 off                    # fp32_matmul (SIMT); twins: tf32, bf16
variant eff_gpt_fp32_tf32 --model gpt --dtype fp32 --tf32 on                       # fp32 inputs on tensor cores (tf32)
variant eff_gpt_forloop --model gpt --optimizer forloop                            # unfused_optimizer; twin: eff_gpt_bf16
variant eff_gpt_foreach --model gpt --optimizer foreach                            # multi-tensor: the middle step
variant eff_gpt_attn_math --model gpt --attention math                             # attention_math; twin: eff_gpt_bf16
variant eff_gpt_attn_eager --model gpt --attention eager                           # hand-written attention
variant eff_gpt_manual --model gpt --manual-ops                                    # unfused_elementwise; twin: next line
variant eff_gpt_manual_compile --model gpt --manual-ops --compile                  # the same model, torch.compile
variant eff_gpt_vocab50257 --model gpt --vocab 50257                               # odd vocab: GEMM kernel choice
variant eff_gpt_vocab50304 --model gpt --vocab 50304                               # padded to a multiple of 64
variant eff_conv_nchw_bf16 --model conv --dtype bf16 --layout nchw                 # layout_conversion; twin: next line
variant eff_conv_cl_bf16 --model conv --dtype bf16 --layout channels_last
variant eff_gpt_fragment --model gpt --fragment                                   # fragmentation far from capacity: info only
variant eff_gpt_fragment_full --model gpt --fragment --hold-gib 112                # ... near capacity (~88 %): warning
variant eff_gpt_full --model gpt --hold-gib 112                                    # near capacity, no fragmentation
variant eff_conv_nchw_fp32 --model conv --dtype fp32 --layout nchw                 # the fp32 NCHW user (ResNet habit)

nvidia-smi --query-gpu=name,driver_version --format=csv >>"$LOG" 2>&1
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >>"$LOG" 2>&1
tar -czf "$OUTDIR/eff_traces.tar.gz" -C "$RUNS" .
size=$(stat -c %s "$OUTDIR/eff_traces.tar.gz")
if [ "$size" -gt $((15 * 1024 * 1024)) ]; then
    split -b 15M -d "$OUTDIR/eff_traces.tar.gz" "$OUTDIR/eff_traces.tar.gz.part"
    rm "$OUTDIR/eff_traces.tar.gz"
fi
rm -rf "$RUNS"
ls -l "$OUTDIR" | tee -a "$LOG"
echo "gpu_efficiency.sh: $failed variant(s) failed" | tee -a "$LOG"
exit $((failed > 0))
