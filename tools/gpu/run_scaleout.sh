#!/usr/bin/env bash
# Lab 03 on the 2-GPU host: ONE configuration per device call, as a short offered-rate scan.
#   bash tools/gpu/run_scaleout.sh RUN_DIR one|dp2|tp2 [--budget-s S]
# one: `vllm serve` on GPU 0 (CUDA_VISIBLE_DEVICES=0); dp2: `--data-parallel-size 2` (two
# engines, vLLM balances the requests); tp2: `--tensor-parallel-size 2` (one engine split over
# two GPUs). Writes everything to RUN_DIR/scaleout/CONFIG/ (knee.jsonl, scaleout.jsonl,
# knee/serve.log, knee/rate-R/ with bench results and per-engine /metrics series, preflight.txt,
# run.log) and appends to RUN_DIR/commands.log. A rerun resumes: finished rates are skipped.
# Cleans up only its own server (its port's process group), never other GPU jobs.
#
# Workload: lab 02's (labs/02_slo_loop.ipynb as tools/gpu/run_lab.sh ran it on the H200):
# 512 in / 128 out random prompts, --ignore-eos, SLO "ttft:300 tpot:50" (p99 ms), vLLM's
# defaults (max_num_seqs 1024 on a >= 70 GiB GPU), max_model_len 4096, dummy weights.
# Each rate sends ceil(rate x WINDOW_S) prompts (10 s of arrivals; 600 at 60 req/s, lab 02's
# count) after a warm-up of half as many at the same rate: one rate costs ~20 s of
# `vllm bench serve` import twice + 5 + 10 s of arrivals + the drain, ~60-75 s (<= 90 s).
# Rates, from labs/results/h200-2026-11-29c (one H200, knee between 50 and 55 req/s: 50 met
# the SLO with p99 TTFT 234 ms, 55 missed it with 454 ms):
#   one  40,50,60    brackets that knee again on this host (40 and 50 met it there, 60 is
#                    above 55, which missed)
#   dp2  80,100,120  around 2x that knee (100-110 if two replicas add up): 100 tests the
#                    replica arithmetic's safe end, 120 lies above 2 x 55, 80 is a margin
#                    below in case the replicas do not add up
#   tp2  60,80,100   TP=2 shortens each step but pays an all-reduce per layer; for a 7B model
#                    that fits one GPU its knee is expected between one GPU's and DP=2's. 60
#                    is shared with `one`, 80 and 100 with dp2: the table compares equal rates
# Wall time per call: preflight ~1 s per GPU, server start 60-140 s (one GPU on the H200;
# DP/TP start their engines/workers in parallel, plus NCCL for TP: budgeted 150 s), three
# rates ~200 s, stop <= 30 s: ~5-7 min. --budget-s (default 450) bounds the python run, the
# hard limit is budget + 75 s, so a call stays under 9 minutes.
# Env: MODEL (/tmp/model-qwen2.5-7b-dummy), RATES (override the config's), WINDOW_S (10),
#      PORT (a free one), DEVICES (override CUDA_VISIBLE_DEVICES, e.g. 1 to run `one` on GPU 1
#      beside another job), STARTUP_ESTIMATE_S (150: no server starts with less budget left),
#      RATE_ESTIMATE_S (90: no rate starts that would not fit; then the longest measured one),
#      PY (python3), LOAD_FORMAT (dummy).
set -uo pipefail
cd "$(dirname "$0")/../.."
RUN=${1:?usage: run_scaleout.sh RUN_DIR one|dp2|tp2 [--budget-s S]}
CONFIG=${2:?usage: run_scaleout.sh RUN_DIR one|dp2|tp2 [--budget-s S]}
shift 2
BUDGET=450
while [ $# -gt 0 ]; do
  case "$1" in
    --budget-s) BUDGET=${2:?--budget-s needs seconds}; shift 2 ;;
    *) echo "error: unknown argument $1 (only --budget-s S)" >&2; exit 2 ;;
  esac
done
source tools/gpu/hostenv.sh
PY=${PY:-python3}
MODEL=${MODEL:-/tmp/model-qwen2.5-7b-dummy}
case "$CONFIG" in
  one) RATES=${RATES:-40,50,60};   DEV=${DEVICES:-0} ;;
  dp2) RATES=${RATES:-80,100,120}; DEV=${DEVICES:-0,1} ;;
  tp2) RATES=${RATES:-60,80,100};  DEV=${DEVICES:-0,1} ;;
  *) echo "error: config must be one, dp2 or tp2, not '$CONFIG'" >&2; exit 2 ;;
esac
PORT=${PORT:-$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
OUTDIR="$RUN/scaleout/$CONFIG"
mkdir -p "$OUTDIR"

# before any GPU time: every GPU this config uses must be there and free
: > "$OUTDIR/preflight.txt"
IFS=',' read -ra GPUS <<< "$DEV"
for g in "${GPUS[@]}"; do
  CUDA_VISIBLE_DEVICES=$g "$PY" -m course_utils preflight --model "$MODEL" --entry serve \
    --out "$OUTDIR" --load-format "${LOAD_FORMAT:-dummy}" 2>&1 | tee -a "$OUTDIR/preflight.txt"
  pf=${PIPESTATUS[0]}
  echo "$(date -u +%FT%TZ) preflight scaleout/$CONFIG GPU $g rc=$pf" | tee -a "$RUN/commands.log"
  [ "$pf" -ne 0 ] && exit 2
done

# only our own server: the process group of whatever serves on our port
stop_ours() {
  local pg
  # the patterns are built so this awk's own command line cannot match them
  pg=$(ps -eo pgid=,args= | awk -v p="$PORT" '$0 ~ /[ ]serve[ ]/ && $0 ~ ("--port[ ]" p "([ ]|$)") {print $1; exit}')
  [ -z "$pg" ] && return 0
  echo "$(date -u +%FT%TZ) stopping our leftover server group $pg (port $PORT)" | tee -a "$RUN/commands.log"
  kill -INT -- "-$pg" 2>/dev/null
  for _ in $(seq 20); do kill -0 -- "-$pg" 2>/dev/null || return 0; sleep 1; done
  kill -KILL -- "-$pg" 2>/dev/null
}
trap stop_ours EXIT

CMD=("$PY" -m course_utils scaleout --config "$CONFIG" --model "$MODEL"
     --out "$RUN/scaleout" --rates "$RATES" --slo "ttft:300 tpot:50" --input-len 512
     --output-len 128 --window-s "${WINDOW_S:-10}" --budget-s "$BUDGET" --devices "$DEV"
     --max-model-len 4096 --load-format "${LOAD_FORMAT:-dummy}" --port "$PORT"
     --startup-estimate-s "${STARTUP_ESTIMATE_S:-150}" --rate-estimate-s "${RATE_ESTIMATE_S:-90}"
     --startup-timeout 420)
echo "$(date -u +%FT%TZ) $ CUDA_VISIBLE_DEVICES=$DEV $(printf '%q ' "${CMD[@]}")" | tee -a "$RUN/commands.log"
t0=$(date +%s)
timeout --signal=INT --kill-after=30 $(( BUDGET + 45 )) "${CMD[@]}" 2>&1 | tee -a "$OUTDIR/run.log"
rc=${PIPESTATUS[0]}
echo "$(date -u +%FT%TZ) scaleout/$CONFIG rc=$rc wall=$(( $(date +%s) - t0 ))s" | tee -a "$RUN/commands.log"
stop_ours
if [ -n "${OUT:-}" ]; then  # small files only: per-request lists and long logs shrunk
  "$PY" tools/gpu/collect.py "$RUN" "$OUT/labrun"
fi
"$PY" - "$RUN/scaleout" <<'PY'
import sys
from course_utils.core.scaleout import three_way
from course_utils.lab.scaleout import load_config
recs = {c: load_config(sys.argv[1], c)[0] for c in ("one", "dp2", "tp2")}
tw = three_way({c: r for c, r in recs.items() if r})
for row in tw.table():
    print("  ".join(f"{k}={v}" for k, v in row.items()))
for c, k in tw.knees.items():
    print(f"{c}: {k['why']}")
for v in tw.verdicts.values():
    print(v["en"])
PY
exit "$rc"
