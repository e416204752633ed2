#!/usr/bin/env bash
# One device call of the trace comparison (trace_vs_fixed.sh): the next unfinished arm, the
# fixed arm first, each resumed call after call until its loop ends on anything but the
# GPU budget. Every call returns both arms' folders ($OUT/fixed.tgz, $OUT/trace.tgz) and the log.
#   bash tools/gpu/session_trace.sh [RUN_DIR]      (RUN_DIR /tmp/labrun)
# Env:
#   CALL_S     this call's seconds (default 560)
#   DEVICE_S   the session's device seconds (default 1800), counted from setup_host.sh's first
#              call (SESSION_T0_FILE, /tmp/.session_t0) with HELD_BEFORE_S (default 150) for
#              the host's start
#   SEED_DIR   a recorded arm folder to start the fixed arm from when RUN_DIR has none
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu/hostenv.sh
RUN=${1:-/tmp/labrun}
PY=${PY:-python3}
CALL=${CALL_S:-560}
t0=$(date +%s)
s0=$(cat "${SESSION_T0_FILE:-/tmp/.session_t0}" 2>/dev/null)
[[ "$s0" =~ ^[0-9]+$ ]] || s0=$t0
mkdir -p "$RUN"
left() {
  local call=$(( CALL - ($(date +%s) - t0) ))
  local dev=$(( ${DEVICE_S:-1800} - ${HELD_BEFORE_S:-150} - ($(date +%s) - s0) ))
  echo $(( call < dev ? call : dev ))
}
say() { echo "$(date -u +%FT%TZ) session_trace: $*" | tee -a "$RUN/commands.log"; }
arm_done() {  # the arm's loop wrote a summary that did not stop on the GPU budget
  $PY - "$RUN/$1/slo/tune.jsonl" <<'PYEOF' 2>/dev/null
import json, sys
rows = [json.loads(x) for x in open(sys.argv[1]) if x.strip()]
s = [r for r in rows if r.get("kind") == "summary"]
sys.exit(0 if s and not s[-1].get("stopped_on_budget", True) else 1)
PYEOF
}
if [ ! -d "$RUN/fixed" ] && [ -n "${SEED_DIR:-}" ] && [ -d "$SEED_DIR" ]; then
  cp -r "$SEED_DIR" "$RUN/fixed" && say "fixed arm started from $SEED_DIR"
fi
rc=0
for arm in fixed trace; do
  arm_done "$arm" && { say "$arm: done"; continue; }
  if [ "$(left)" -lt 240 ]; then say "$arm: $(left) s left, not started"; break; fi
  budget=$(( ($(left) - 90) / 60 ))
  say "$arm: run with $(left) s left, loop budget $budget GPU min"
  LAB_TIMEOUT_S=$(( $(left) - 40 )) SLO_BUDGET=$budget OUT= \
    bash tools/gpu/trace_vs_fixed.sh "$arm" "$RUN"
  rc=$?
  say "$arm rc=$rc"
  arm_done "$arm" || break  # resume it in the next call
done
bash tools/gpu/cleanup_gpu.sh | tee -a "$RUN/commands.log"
if [ -n "${OUT:-}" ]; then
  for arm in fixed trace; do [ -d "$RUN/$arm" ] && pack_folder "$RUN/$arm" "$arm"; done
  cp "$RUN/commands.log" "$OUT/commands.log"
fi
say "call done in $(( $(date +%s) - t0 )) s"
# a cut by the call's time (124) is a normal end: the next call resumes
[ "$rc" -eq 124 ] && exit 0
exit "$rc"
