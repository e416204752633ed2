#!/usr/bin/env bash
# One `python -m course_utils tune` run on the offline GPU host, within one device call:
# preflight (timed), the loop with a GPU-minute budget that ends it inside the call, the
# GPU checked free, small results copied to $OUT. A rerun resumes from points.jsonl.
#   bash tools/gpu/run_tune.sh NAME [RUN_DIR] -- TUNE_ARGS...
# TUNE_ARGS may name a workload preset: -- --preset decode --gpu h200 --gpu-minutes 8
# PY (python3): the Python that runs course_utils.
set -uo pipefail
cd "$(dirname "$0")/../.."
NAME=${1:?usage: run_tune.sh NAME [RUN_DIR] -- TUNE_ARGS...}
RUN=/tmp/labrun
shift
if [ "${1:-}" != "--" ] && [ -n "${1:-}" ]; then RUN=$1; shift; fi
[ "${1:-}" = "--" ] && shift
source tools/gpu/hostenv.sh
PY=${PY:-python3}
MODEL=${MODEL:-/tmp/model-qwen2.5-7b-dummy}
LIMIT=${TUNE_TIMEOUT_S:-560}   # the device call stops at 600 s: keep time to copy results
OUTDIR="$RUN/$NAME"
mkdir -p "$OUTDIR"
t0=$(date +%s.%N)
$PY -m course_utils preflight --model "$MODEL" --entry serve --out "$OUTDIR" \
  --load-format dummy 2>&1 | tee "$OUTDIR/preflight.txt"
pf=${PIPESTATUS[0]}
secs=$($PY -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$t0" "$(date +%s.%N)")
echo "$(date -u +%FT%TZ) preflight $NAME rc=$pf seconds=$secs" | tee -a "$RUN/commands.log"
[ "$pf" -ne 0 ] && exit 2
CMD=($PY -m course_utils tune --model "$MODEL" --out "$OUTDIR" --load-format dummy
     --ignore-eos --no-progress "$@")
echo "$(date -u +%FT%TZ) $ $(printf '%q ' "${CMD[@]}")" | tee -a "$RUN/commands.log"
t1=$(date +%s)
timeout --signal=INT --kill-after=30 "$LIMIT" "${CMD[@]}" > "$OUTDIR/tune-summary.json" \
  2> >(tee -a "$RUN/$NAME.log" >&2)
rc=$?
echo "$(date -u +%FT%TZ) rc=$rc wall=$(( $(date +%s) - t1 ))s" | tee -a "$RUN/commands.log"
bash tools/gpu/cleanup_gpu.sh | tee -a "$RUN/commands.log"
[ -n "${OUT:-}" ] && $PY tools/gpu/collect.py "$RUN" "$OUT/labrun"
$PY - "$OUTDIR" <<'PY'
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
for line in (d / "tune.jsonl").read_text().splitlines() if (d / "tune.jsonl").exists() else []:
    try:
        s = json.loads(line)
    except ValueError:
        continue
    if s.get("kind") == "summary":
        print("stop:", s["stop_reason"], "| knobs:", s["knobs"], "| score:", s["score"])
    elif s.get("kind") == "sweep":
        print("step", s["step"], s["knob"], s.get("decision"), s.get("decision_why"))
    elif s.get("kind") == "baseline":
        print("baseline", s.get("score"), s.get("diagnosis", {}).get("leaf"), s.get("validity_issues"))
for line in (d / "points.jsonl").read_text().splitlines() if (d / "points.jsonl").exists() else []:
    p = json.loads(line)
    print(p["knob"], p["value"], p["status"], [(w["index"], w["valid"], [j["kernel"] for j in w["jit"]],
          round((w.get("score") or {}).get("request_goodput") or 0, 2)) for w in p.get("windows", [])])
PY
exit "$rc"
