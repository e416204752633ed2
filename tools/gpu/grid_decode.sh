#!/usr/bin/env bash
# The decode ground truth: vLLM's own grid (`vllm bench sweep serve`) over the recorded decode
# run's exact workload and candidates (labs/results/h200-2026-11-30/decode12: 3072 in / 256
# out, 150 prompts at 12 req/s, SLO "ttft:2000 tpot:15", base max_model_len=4096; combos:
# vLLM's defaults, max_num_batched_tokens 2048 and 4096, max_num_seqs 128 and 256, one knob
# at a time from the defaults: the 5 configurations the loop measured), then the loop against it.
#   bash tools/gpu/grid_decode.sh [RUN_DIR]            2 GPUs: halves at once (GPU 0: 3 combos,
#                                                      GPU 1: 2), merged, compared
#   GPUS=1 bash tools/gpu/grid_decode.sh [RUN_DIR]     one GPU, all 5 combos
# Resumable: run it again (same RUN_DIR, same machine) and finished combos start no server.
# Each half gets BUDGET_S (540) of sweep time; the call ends within ~BUDGET_S + 60 s.
# Env: GPUS (2), BUDGET_S (540), WARMUP_SHARE (1.0: the half-length warm-up of the recorded
#   run peaked at 72-75 running requests against the windows' 128-137; the whole load's
#   prompts reach them), NUM_RUNS (1), TUNE_DIR (the recorded decode12 folder), PRESET
#   (decode), GPU_SIZE (h200), MODEL, VLLM, SERVE_VLLM, PY, AFTER_BENCH_CMD (fake: "true").
# Writes RUN_DIR/grid-decode-gpu<i>/ (one side_by_side.sh folder per GPU) and the merged
# RUN_DIR/grid-decode/ (vllm_sweep/grid/SERVE--*, timing.json, grid.json, compare.md/.json).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
RUN=${1:-/tmp/labrun}
source tools/gpu/hostenv.sh
PY=${PY:-python3}
GPUS=${GPUS:-2}
export PRESET=${PRESET:-decode} GPU_SIZE=${GPU_SIZE:-h200}
export WARMUP=load WARMUP_SHARE=${WARMUP_SHARE:-1.0} NUM_RUNS=${NUM_RUNS:-1}
export BUDGET_S=${BUDGET_S:-540}
TUNE_DIR=${TUNE_DIR:-$ROOT/labs/results/h200-2026-11-30/decode12}
MERGED="$RUN/grid-decode"
mkdir -p "$RUN"
t0=$(date +%s)
pids=()
parts=()
for i in $(seq 0 $((GPUS - 1))); do
  name="grid-decode-gpu$i"
  parts+=("$RUN/$name")
  # one job per GPU, its own port (side_by_side.sh picks a free one) and folder; no $OUT
  # here: the merged folder is collected once below
  CUDA_VISIBLE_DEVICES=$i PART="$i/$GPUS" NAME="$name" OUT= TUNE_DIR= \
    bash tools/gpu/side_by_side.sh "$RUN" > "$RUN/$name.out" 2>&1 &
  pids+=($!)
  sleep 2   # the two preflights and port picks do not race
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
for i in $(seq 0 $((GPUS - 1))); do
  echo "== GPU $i =="; tail -n 12 "$RUN/grid-decode-gpu$i.out"
done
echo "$(date -u +%FT%TZ) grid_decode rc=$rc wall=$(( $(date +%s) - t0 ))s" | tee -a "$RUN/commands.log"
rm -rf "$MERGED"
$PY tools/gpu/sweep_files.py merge "$MERGED" "${parts[@]}" || exit 2
$PY tools/gpu/gridrun.py compare "$MERGED/vllm_sweep" "$TUNE_DIR" \
  --json "$MERGED/compare.json" | tee "$MERGED/compare.md"
$PY tools/gpu/gridrun.py compare "$MERGED/vllm_sweep" "$TUNE_DIR" --lang zh \
  > "$MERGED/compare.zh.md"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT/labrun"
  for d in "${parts[@]}" "$MERGED"; do
    $PY tools/gpu/collect.py "$d" "$OUT/labrun/$(basename "$d")"
    $PY tools/gpu/sweep_files.py shrink "$OUT/labrun/$(basename "$d")"
  done
  cp "$RUN"/grid-decode-gpu*.out "$RUN/commands.log" "$OUT/labrun/" 2>/dev/null
fi
exit "$rc"
