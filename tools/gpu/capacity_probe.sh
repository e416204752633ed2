#!/usr/bin/env bash
# The capacity probe on the GPU host, within one device call: each named case starts the real
# `vllm serve` (dummy weights, VLLM_LOGGING_LEVEL=DEBUG), waits for /health, records what vLLM
# logged about memory in RUN_DIR/capacity/probe.jsonl (+ one serve log per case), and stops it.
# A rerun resumes (recorded cases are skipped). Honours CUDA_VISIBLE_DEVICES; never touches
# another job's GPU processes (no cleanup_gpu.sh here: it may run beside another job).
#   [CUDA_VISIBLE_DEVICES=1] [BUDGET_S=540] bash tools/gpu/capacity_probe.sh RUN_DIR [CASES...]
# PY: the Python (default python3; needs torch for the CUDA total); VLLM_CMD: the vllm command.
# Cases: python tools/gpu/capacity_probe.py x --list (default: all of them).
set -uo pipefail
cd "$(dirname "$0")/../.."
RUN=${1:?usage: capacity_probe.sh RUN_DIR [CASES...]}
shift
source tools/gpu/hostenv.sh
PY=${PY:-python3}
BUDGET=${BUDGET_S:-540}   # the device call stops at 600 s: keep time to copy results
mkdir -p "$RUN/capacity"
CMD=("$PY" tools/gpu/capacity_probe.py "$RUN" "$@" --budget-s "$BUDGET"
     --vllm-cmd "${VLLM_CMD:-vllm}" --python "${TORCH_PY:-$PY}")
echo "$(date -u +%FT%TZ) CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-} \$ $(printf '%q ' "${CMD[@]}")" \
  | tee -a "$RUN/commands.log"
t1=$(date +%s)
# SIGINT reaches Python as KeyboardInterrupt: VllmServer stops its own process group
timeout --signal=INT --kill-after=30 "$((BUDGET + 40))" "${CMD[@]}" 2>&1 | tee -a "$RUN/capacity/probe.out"
rc=${PIPESTATUS[0]}
echo "$(date -u +%FT%TZ) capacity_probe rc=$rc wall=$(( $(date +%s) - t1 ))s" | tee -a "$RUN/commands.log"
[ -n "${OUT:-}" ] && "$PY" tools/gpu/collect.py "$RUN" "$OUT/labrun"
exit "$rc"
