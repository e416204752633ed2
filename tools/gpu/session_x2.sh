#!/usr/bin/env bash
# One device session on `nvidia-h200-x2`, after setup_host.sh: each step is one device call
# (< 10 min), issued back to back (the machine goes back after 30 s idle).
#   OUT=$OUT bash tools/gpu/session_x2.sh A|B|C
# A  GPU 1: capacity probes at the rehearsed 24 GiB budget (bf16 serve defaults, AWQ at three
#    utilisations); GPU 0: lab 03 `one` (one replica), then the H200-default probes.
# B  lab 03 `dp2` (vLLM's --data-parallel-size 2 over both GPUs).
# C  lab 03 `tp2` (--tensor-parallel-size 2 over both GPUs).
# Results: /tmp/labrun (scaleout/, cap0/capacity/, cap1/capacity/, commands.log), packed into
# $OUT/STEP-<folder>.tgz, one per top-level folder (at most 8 files of 16 MiB come back).
set -uo pipefail
cd "$(dirname "$0")/../.."
STEP=${1:?usage: session_x2.sh A|B|C}
RUN=/tmp/labrun
OUTDIR=${OUT:-}
unset OUT   # the sub-scripts would copy through collect.py themselves
source tools/gpu/hostenv.sh
mkdir -p "$RUN"
t0=$(date +%s)
case "$STEP" in
  A)
    (CUDA_VISIBLE_DEVICES=1 BUDGET_S=${BUDGET_CAP1:-500} bash tools/gpu/capacity_probe.sh \
       "$RUN/cap1" bf16-4090-serve awq-4090-llm-080 awq-4090-llm-090 awq-4090-llm-094 \
       >"$RUN/cap1.out" 2>&1) &
    bash tools/gpu/run_scaleout.sh "$RUN" one --budget-s "${BUDGET_ONE:-330}"
    left=$(( ${BUDGET_A:-520} - ($(date +%s) - t0) ))
    if [ "$left" -gt 130 ]; then
      CUDA_VISIBLE_DEVICES=0 BUDGET_S=$left bash tools/gpu/capacity_probe.sh "$RUN/cap0" \
        bf16-h200-defaults llama3-8b-h200-defaults llama3-8b-4090-serve
    fi
    wait
    tail -5 "$RUN/cap1.out" ;;
  B) bash tools/gpu/run_scaleout.sh "$RUN" dp2 --budget-s "${BUDGET_B:-430}" ;;
  C) bash tools/gpu/run_scaleout.sh "$RUN" tp2 --budget-s "${BUDGET_C:-430}" ;;
  *) echo "error: step must be A, B or C, not '$STEP'" >&2; exit 2 ;;
esac
echo "step $STEP wall $(( $(date +%s) - t0 )) s"
bash tools/gpu/cleanup_gpu.sh
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader
if [ -n "$OUTDIR" ]; then
  # one archive per top-level folder: a single archive of a whole run passed the 16 MiB a
  # returned file may have (2026-11-30, call D), and at most 8 files come back
  for d in "$RUN"/*/; do
    tar czf "$OUTDIR/$STEP-$(basename "$d").tgz" -C /tmp "labrun/$(basename "$d")"
  done
  cp "$RUN/commands.log" "$OUTDIR/$STEP-commands.log" 2>/dev/null
  ls -la "$OUTDIR"
fi
