#!/usr/bin/env bash
# One row of the loop-vs-grid table in one device call: the loop from vLLM's defaults on a
# preset (run_tune.sh), then vLLM's own grid over the same candidates, workload and warm-up
# (side_by_side.sh with the preset and TUNE_DIR: compare.md / compare.json). A rerun resumes
# both: the loop from points.jsonl, the grid with vLLM's --resume.
#   bash tools/gpu/case.sh PRESET [RUN_DIR]            (on the GPU host; RUN_DIR /tmp/labrun)
# Env:
#   CALL_S (570)   this call's time for both parts (a device call stops at 600 s)
#   LOOP_S (250)   the loop's share; its --gpu-minutes stops it between points inside it
#   GPU_SIZE (h200) the preset's size; TUNE_EXTRA: more `tune` flags (explicit ones win over
#                  the preset's, e.g. a smaller workload)
#   OUT            when set: each folder, shrunk by collect.py, as $OUT/<folder>.tgz, and
#                  commands.log (a device call returns files at most 2 folders deep); packed
#                  after the loop, after each finished grid run, and at the end
#   CASE (PRESET)  the folders' name (CASE and grid-CASE): a variant of a preset, e.g. the
#                  2-knob side by side (GRID "K1=.. x K2=..", RATE, TUNE_EXTRA's --candidate)
#   the rest as side_by_side.sh (INPUT_LEN, OUTPUT_LEN, PROMPTS, RATE, GRID override the preset)
set -uo pipefail
cd "$(dirname "$0")/../.."
PRESET=${1:?usage: case.sh PRESET [RUN_DIR]}
CASE=${CASE:-$PRESET}
RUN=${2:-/tmp/labrun}
CALL=${CALL_S:-570}
LOOP=${LOOP_S:-250}
GPU_SIZE=${GPU_SIZE:-h200}
PY=${PY:-python3}
source tools/gpu/hostenv.sh
# each folder, shrunk, as $OUT/<folder>.tgz: after the loop too, so that a call cut during
# the grid still returns the loop
pack_out() {
  [ -n "${OUT:-}" ] || return 0
  [ -d "$RUN/$CASE" ] && pack_folder "$RUN/$CASE" "$CASE"
  [ -d "$RUN/grid-$CASE" ] && pack_folder "$RUN/grid-$CASE" "grid-$CASE" grid
  cp "$RUN/commands.log" "$OUT/commands.log"
}
# during the grid: pack again each time a combo of vLLM's sweep is finished (its summary.json
# written, after its runs, gridbench's harness files and the sweep's rewrite of run=N.json),
# so that a call stopped by the device's own limit still returns the combos finished before
# it. Stopped through a flag, never killed mid-archive; an EXIT/INT/TERM trap stops it too.
finished_runs() {
  find "$RUN/grid-$CASE/vllm_sweep" -name summary.json -path '*/SERVE-*' 2>/dev/null | wc -l
}
packer=""
start_packer() {
  [ -n "${OUT:-}" ] || return 0
  rm -f "$RUN/.packer-stop"
  (
    seen=$(finished_runs)
    while [ ! -e "$RUN/.packer-stop" ]; do
      sleep 1
      now=$(finished_runs)
      if [ "$now" != "$seen" ] && [ ! -e "$RUN/.packer-stop" ]; then
        pack_out && echo "$(date -u +%FT%TZ) case.sh $CASE: packed after $now finished" \
          "combo(s)" | tee -a "$RUN/commands.log"
        seen=$now
      fi
    done
  ) &
  packer=$!
  trap 'stop_packer' EXIT INT TERM
}
stop_packer() {
  [ -n "$packer" ] || return 0
  touch "$RUN/.packer-stop"
  wait "$packer" 2>/dev/null
  rm -f "$RUN/.packer-stop"
  packer=""
  trap - EXIT INT TERM
}
mkdir -p "$RUN"
t0=$(date +%s)
# the loop: a budget a little under its share, so that it stops itself between points
mins=$($PY -c "import sys; print(round(max(0.5, (float(sys.argv[1]) - 30) / 60), 2))" "$LOOP")
# shellcheck disable=SC2086  # TUNE_EXTRA is a list of flags
OUT= TUNE_TIMEOUT_S=$LOOP \
  bash tools/gpu/run_tune.sh "$CASE" "$RUN" -- --preset "$PRESET" --gpu "$GPU_SIZE" \
  --gpu-minutes "$mins" --seed 0 --startup-timeout 300 ${TUNE_EXTRA:-}
loop_rc=$?
if [ "$loop_rc" -eq 2 ]; then  # the preflight refused this host: no grid either
  echo "$(date -u +%FT%TZ) case.sh $CASE: preflight failed, nothing run" | tee -a "$RUN/commands.log"
  exit 2
fi
pack_out
left=$(( CALL - ($(date +%s) - t0) - 30 ))
grid_rc=0
if [ "$left" -ge "${GRID_MIN_S:-120}" ]; then
  start_packer
  OUT= PRESET=$PRESET GPU_SIZE=$GPU_SIZE NAME="grid-$CASE" TUNE_DIR="$RUN/$CASE" \
    BUDGET_S=$left bash tools/gpu/side_by_side.sh "$RUN"
  grid_rc=$?
  stop_packer
else
  echo "$(date -u +%FT%TZ) case.sh $CASE: ${left}s left, the grid waits for the next call" \
    | tee -a "$RUN/commands.log"
fi
echo "$(date -u +%FT%TZ) case.sh $CASE loop_rc=$loop_rc grid_rc=$grid_rc" \
  "wall=$(( $(date +%s) - t0 ))s" | tee -a "$RUN/commands.log"
pack_out
# a loop cut by its timeout (130: interrupted) still leaves its finished points: not a failure
[ "$loop_rc" -eq 130 ] && loop_rc=0
[ "$loop_rc" -ne 0 ] && exit "$loop_rc"
exit "$grid_rc"
