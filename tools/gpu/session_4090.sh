#!/usr/bin/env bash
# One device call of the rehearsed-4090 session: the next unfinished piece of
#   1. lab 01 at the RTX 4090's budget (run_lab.sh knobs-4090),
#   2. lab 02 at the RTX 4090's budget (run_lab.sh slo-4090), resumed call after call
#      (a per-call GPU-minute budget stops the loop between points) until its loop ends,
#   3. the kv case (case.sh kv: the loop, then vLLM's grid), resumed likewise.
# Every call packs RUN_DIR into $OUT/run.tgz (each folder shrunk by collect.py) with the log.
#   bash tools/gpu/session_4090.sh [RUN_DIR]     (CALL_S: this call's seconds, default 540)
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu/hostenv.sh
RUN=${1:-/tmp/labrun}
CALL=${CALL_S:-540}
mkdir -p "$RUN"
t0=$(date +%s)
left() { echo $(( CALL - ($(date +%s) - t0) )); }
say() { echo "$(date -u +%FT%TZ) session_4090: $*" | tee -a "$RUN/commands.log"; }
pack_out() {
  [ -n "${OUT:-}" ] || return 0
  pack_folder "$RUN" labrun && mv -f "$OUT/labrun.tgz" "$OUT/run.tgz"
  cp "$RUN/commands.log" "$OUT/commands.log"
}
finished_lab() {  # papermill rc 0 and, for lab 02, a loop that did not stop on the budget
  [ -e "$RUN/.done-$1" ]
}
run_lab() {  # LAB [papermill args]
  local lab=$1 log rc; shift
  log=$(mktemp)
  LAB_TIMEOUT_S=$(( $(left) - 40 )) OUT= bash tools/gpu/run_lab.sh "$lab" "$RUN" "$@" | tee "$log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ] && ! grep -q "^tune stop reason: \(budget\|none\)" "$log"; then
    touch "$RUN/.done-$lab"; say "$lab finished"
  else
    say "$lab not finished (rc=$rc)"
  fi
  rm -f "$log"
  pack_out
}
if ! finished_lab knobs-4090; then
  run_lab knobs-4090
fi
if finished_lab knobs-4090 && ! finished_lab slo-4090 && [ "$(left)" -ge 200 ]; then
  if [ -s "$RUN/lab02-4090/knee.jsonl" ]; then b=6; else b=4; fi
  run_lab slo-4090 -p budget_gpu_minutes "$(( b < ($(left) - 60) / 60 ? b : ($(left) - 60) / 60 ))"
fi
if finished_lab slo-4090 && [ "$(left)" -ge 240 ]; then
  CALL_S=$(( $(left) - 20 )) LOOP_S=$(( $(left) - 30 )) OUT= bash tools/gpu/case.sh kv "$RUN"
  say "case.sh kv rc=$?"
fi
bash tools/gpu/environment.sh "$RUN" > /dev/null 2>&1
bash tools/gpu/cleanup_gpu.sh | tee -a "$RUN/commands.log"
pack_out
say "call done in $(( $(date +%s) - t0 ))s"
