#!/usr/bin/env bash
# The SLO lesson's measured point, one arm per device call: lab 02 (the knee scan, then the
# loop) on the example trace (labs/data/chat_trace.jsonl: a shared 1024-token system prompt,
# log-normal turns and answers, bursty arrivals), and on a fixed-length random workload with
# the trace's mean lengths (of the measured requests), Poisson arrivals, no shared prefix:
# the same rate, SLO, candidates, prompts and starting knobs (vLLM's defaults). A rerun of an
# arm resumes it (run_lab.sh: finished points are read back, not served again).
#   bash tools/gpu/trace_vs_fixed.sh fixed|trace [RUN_DIR]     (RUN_DIR /tmp/labrun)
# Run `fixed` first: without RATE, the loop's rate of both arms is the fixed arm's
# (knee_fraction x its knee, recorded in RUN_DIR/fixed/slo/points.jsonl): the rate a tuner
# measuring with fixed lengths would pick; the trace arm is then measured at that rate.
# Env:
#   RATE          the loop's rate for both arms (req/s); unset: as above
#   KNEE_RATES    "[16, 24, 32, 40]": the knee scan's rates (the same for both arms)
#   KNEE_FRACTION 0.9: the fixed arm's loop rate as a share of its knee (without RATE)
#   PROMPTS       200: the trace's first 200 requests per window (the warm-up: the same, other tokens)
#   SLO           "ttft:300 tpot:50" (lab 02's H200 SLO)
#   CANDIDATES    "[256, 512]" (max_num_seqs), SECOND "[16384]" (max_num_batched_tokens)
#   TRACE         labs/data/chat_trace.jsonl (a path inside the repo: the replay finds it)
#   OUT           when set: the arm's folder, shrunk, as $OUT/<arm>.tgz, and commands.log
#   PY            python3; the rest as run_lab.sh (MODEL, SLO_BUDGET, LAB_TIMEOUT_S)
set -uo pipefail
cd "$(dirname "$0")/../.."
ARM=${1:?usage: trace_vs_fixed.sh fixed|trace [RUN_DIR]}
RUN=${2:-/tmp/labrun}
PY=${PY:-python3}
TRACE=${TRACE:-labs/data/chat_trace.jsonl}
PROMPTS=${PROMPTS:-200}
KNEE_RATES=${KNEE_RATES:-[16, 24, 32, 40]}
KNEE_FRACTION=${KNEE_FRACTION:-0.9}
SLO=${SLO:-ttft:300 tpot:50}
CANDIDATES=${CANDIDATES:-[256, 512]}
SECOND=${SECOND:-[16384]}
source tools/gpu/hostenv.sh
mkdir -p "$RUN"
# the trace's mean lengths over the requests a window sends (core.workload.TraceWorkload)
read -r MEAN_IN MEAN_OUT < <($PY -c '
import sys
from course_utils.core.workload import TraceWorkload
w = TraceWorkload.load(sys.argv[1], num_prompts=int(sys.argv[2]))
print(w.input_len, w.output_len)' "$TRACE" "$PROMPTS") || exit 2
if [ -z "${RATE:-}" ] && [ "$ARM" = trace ]; then
  RATE=$($PY -c '
import json, sys
for line in open(sys.argv[1]):
    print(json.loads(line)["workload"]["request_rate"]); break' \
    "$RUN/fixed/slo/points.jsonl" 2>/dev/null)
  [ -n "$RATE" ] || { echo "error: no fixed-arm rate in $RUN/fixed/slo/points.jsonl → fix:" \
    "run the fixed arm first, or set RATE"; exit 2; }
fi
case "$ARM" in
  trace) WL=(-p workload "$TRACE") ;;
  fixed) WL=(-p input_len "$MEAN_IN" -p output_len "$MEAN_OUT" -p prefix_len 0) ;;
  *) echo "error: unknown arm $ARM → fix: fixed or trace"; exit 2 ;;
esac
if [ -n "${RATE:-}" ]; then RATE_ARGS=(-p rate "$RATE"); else RATE_ARGS=(-p rate None); fi
echo "$(date -u +%FT%TZ) trace_vs_fixed.sh $ARM: trace $TRACE, means $MEAN_IN in / $MEAN_OUT" \
  "out over $PROMPTS requests, rate ${RATE:-knee x $KNEE_FRACTION}, SLO $SLO" | tee -a "$RUN/commands.log"
OUT= PY=$PY bash tools/gpu/run_lab.sh slo "$RUN/$ARM" "${WL[@]}" "${RATE_ARGS[@]}" \
  -p num_prompts "$PROMPTS" -y "knee_rates: $KNEE_RATES" -p knee_fraction "$KNEE_FRACTION" \
  -p slo "$SLO" -y 'base_knobs: {}' -y "candidates: $CANDIDATES" \
  -y "second_candidates: $SECOND"
rc=$?
echo "$(date -u +%FT%TZ) trace_vs_fixed.sh $ARM rc=$rc" | tee -a "$RUN/commands.log"
# the arm's folder as $OUT/<arm>.tgz (hostenv.sh pack_folder), and commands.log
if [ -n "${OUT:-}" ]; then
  pack_folder "$RUN/$ARM" "$ARM"
  cp "$RUN/commands.log" "$OUT/commands.log"
fi
exit "$rc"
