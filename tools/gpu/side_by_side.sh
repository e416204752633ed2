#!/usr/bin/env bash
# vLLM's own grid: vLLM 0.26.0's `vllm bench sweep serve` over one or two knobs, on any
# workload, with lab.measure's warm-up before each run (tools/gpu/gridrun.py; read back by
# course_utils.lab.grid).
# One device call (its time budget BUDGET_S); a call stopped by the budget is resumed by the
# next with vLLM's own --resume (finished combos start no server). Never touches processes
# that are not its own: at the end it kills only servers on its PORT (their process groups).
#   bash tools/gpu/side_by_side.sh [RUN_DIR]          (on the GPU host; RUN_DIR /tmp/labrun)
# Writes RUN_DIR/$NAME/: vllm_sweep/grid/SERVE--<combo>/run=N.json (+ run=N.harness.json,
# run=N.warmup.json/.log, run=N.bench.log, summary.json), grid.json, serve_params.json,
# serve_cmd.txt, bench_cmd.txt, sweep-<n>.log (each line stamped with its Unix time),
# timing.json, and with TUNE_DIR, compare.md / compare.json (the loop against this grid).
# Env (explicit values override the preset's):
#   PRESET        core.presets name (prefill, decode, kv, knee, prefix); GPU_SIZE (h200)
#   INPUT_LEN OUTPUT_LEN PREFIX_LEN PROMPTS RATE SLO_SPEC   the workload and SLO
#   BASE          base knobs in the serve command, e.g. "max_model_len=4096"
#   GRID          "K=V1,V2" | "K1=.. x K2=.." (every pair) | "K1=.. + K2=.." (one at a time
#                 from the base, vLLM's defaults included)
#   PART (0/1)    I/N: run every N-th combo from the I-th (two GPUs: 0/2 and 1/2)
#   NAME          the folder under RUN_DIR (sidebyside)
#   WARMUP (load) load: lab.measure's warm-up at the load's rate (WARMUP_SHARE of its prompts,
#                 default lab.measure's 0.5); num:N: vLLM's own `--num-warmups N` instead
#   NUM_RUNS (1)  runs per combo (2+: each combo's own run-to-run spread)
#   BUDGET_S (540) the sweep's time in this call; READY_TIMEOUT_S (420)
#   TUNE_DIR      a tune() folder measured on the same workload: compare.md
#   VLLM (vllm) the sweeper and bench client; SERVE_VLLM (vllm) the server (must end in "vllm"
#   for the sweep's own cache reset); AFTER_BENCH_CMD (fake server: "true"); MODEL; PY; PORT
set -uo pipefail
cd "$(dirname "$0")/../.."
RUN=${1:-/tmp/labrun}
source tools/gpu/hostenv.sh   # src/ on PYTHONPATH; the staged site on the GPU host
# the sweep starts its servers with it too (server.py); needed for POST /reset_prefix_cache
export VLLM_SERVER_DEV_MODE=1
VLLM=${VLLM:-vllm}
SERVE_VLLM=${SERVE_VLLM:-vllm}
PY=${PY:-python3}
MODEL=${MODEL:-/tmp/model-qwen2.5-7b-dummy}
GPU_SIZE=${GPU_SIZE:-h200}
NAME=${NAME:-sidebyside}
PART=${PART:-0/1}
WARMUP=${WARMUP:-load}
NUM_RUNS=${NUM_RUNS:-1}
LIMIT=${BUDGET_S:-540}
READY=${READY_TIMEOUT_S:-420}
case "$GPU_SIZE" in 4090|rtx4090) GPU_GIB=${GPU_GIB:-24} ;; *) GPU_GIB=${GPU_GIB:-140} ;; esac
SBS="$RUN/$NAME"
OUTDIR="$SBS/vllm_sweep"
EXP=grid
mkdir -p "$SBS"

# lab 02's old side-by-side workload unless a preset or explicit values say otherwise
if [ -z "${PRESET:-}" ]; then
  INPUT_LEN=${INPUT_LEN:-512} OUTPUT_LEN=${OUTPUT_LEN:-128} PROMPTS=${PROMPTS:-600}
  RATE=${RATE:-45} SLO_SPEC=${SLO_SPEC:-ttft:300 tpot:50} BASE=${BASE:-max_model_len=4096}
  GRID=${GRID:-max_num_seqs=64,128,256,1024}
fi
ARGS=()
[ -n "${PRESET:-}" ] && ARGS+=(--preset "$PRESET" --gpu "$GPU_SIZE")
[ -n "${INPUT_LEN:-}" ] && ARGS+=(--input-len "$INPUT_LEN")
[ -n "${OUTPUT_LEN:-}" ] && ARGS+=(--output-len "$OUTPUT_LEN")
[ -n "${PREFIX_LEN:-}" ] && ARGS+=(--prefix-len "$PREFIX_LEN")
[ -n "${PROMPTS:-}" ] && ARGS+=(--num-prompts "$PROMPTS")
[ -n "${RATE:-}" ] && ARGS+=(--rate "$RATE")
[ -n "${SLO_SPEC:-}" ] && ARGS+=(--slo "$SLO_SPEC")
[ -n "${GRID:-}" ] && ARGS+=(--grid "$GRID")
for kv in ${BASE:-}; do ARGS+=(--base "$kv"); done
case "$WARMUP" in
  load) [ -n "${WARMUP_SHARE:-}" ] && ARGS+=(--warmup-share "$WARMUP_SHARE") ;;
  num:*) ARGS+=(--num-warmups "${WARMUP#num:}") ;;
  *) echo "WARMUP must be load or num:N, not $WARMUP" >&2; exit 2 ;;
esac

# one port for this job: each combo's server is SIGKILLed before the next starts
PORT=${PORT:-$($PY -c 'from course_utils.lab.server import free_port; print(free_port())')}
# before any GPU time: the serving vllm, the GPU CUDA_VISIBLE_DEVICES leaves, memory, model,
# this port, disk
$PY -m course_utils preflight --model "$MODEL" --vllm-cmd "$SERVE_VLLM" --port "$PORT" \
  --load-format dummy --out "$SBS" || exit 2
# serve_params.json (this part's combos, every one validated), serve_cmd.txt, bench_cmd.txt
$PY tools/gpu/gridrun.py prepare "$SBS" --model "$MODEL" --port "$PORT" \
  --part "$PART" --gpu-memory-gib "$GPU_GIB" --load-format dummy --vllm-cmd "$VLLM" \
  --serve-vllm "$SERVE_VLLM" --python "$PY" "${ARGS[@]}" || exit 2
SERVE_CMD=$(cat "$SBS/serve_cmd.txt")
BENCH_CMD=$(cat "$SBS/bench_cmd.txt")

RESUME=()
if [ -d "$OUTDIR/$EXP" ]; then  # an earlier call started it: vLLM's own resume
  RESUME=(--resume)
  # a combo the validity gate rejected is measured again, never used: moved to rejected/
  $PY tools/gpu/gridrun.py reopen "$SBS" | tee -a "$SBS/commands.log"
fi
CMD=($VLLM bench sweep serve --serve-cmd "$SERVE_CMD" --bench-cmd "$BENCH_CMD"
     --serve-params "$SBS/serve_params.json" -o "$OUTDIR" -e "$EXP" --num-runs "$NUM_RUNS"
     --server-ready-timeout "$READY" --show-stdout "${RESUME[@]}")
[ -n "${AFTER_BENCH_CMD:-}" ] && CMD+=(--after-bench-cmd "$AFTER_BENCH_CMD")
N=$(( $(ls "$SBS"/sweep-*.log 2>/dev/null | wc -l) + 1 ))
LOG="$SBS/sweep-$N.log"
echo "$(date -u +%FT%TZ) $ CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-} $(printf '%q ' "${CMD[@]}")" \
  | tee -a "$RUN/commands.log" "$SBS/commands.log"
t0=$EPOCHREALTIME
# every line stamped with its Unix time: course_utils.core.vllm_logs.parse_sweep_log reads the
# [BEGIN SERVER] / [BEGIN BENCHMARK] / [END SERVER] markers of vllm/benchmarks/sweep/serve.py
timeout --signal=INT --kill-after=30 "$LIMIT" "${CMD[@]}" 2>&1 \
  | while IFS= read -r line || [ -n "$line" ]; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done > "$LOG"
rc=${PIPESTATUS[0]}
wall=$($PY -c "print(round($EPOCHREALTIME - $t0, 2))")
echo "$(date -u +%FT%TZ) side_by_side $NAME call $N rc=$rc wall=${wall}s" | tee -a "$RUN/commands.log" "$SBS/commands.log"
$PY tools/gpu/sweep_files.py timing "$LOG" "$SBS/timing.json" --call-wall-s "$wall" --rc "$rc"
# only this job's servers (a sweeper killed before it could stop its server leaves one)
$PY tools/gpu/sweep_files.py cleanup --port "$PORT" | tee -a "$SBS/commands.log"
grep -E "^[0-9.]+ (.*\[(BEGIN|END|SKIPPED) [A-Z]+\]|Server overrides|gridbench: |Warming up with|Experiment has been saved|RuntimeError|.*Error|.*JIT compilation during inference)" "$LOG" | tail -40
done_runs=$(ls "$OUTDIR/$EXP"/SERVE-*/summary.json 2>/dev/null | wc -l)
want=$($PY -c "import json,sys; print(len(json.load(open(sys.argv[1]))))" "$SBS/serve_params.json")
echo "combos done: $done_runs of $want in this part"
if [ "$rc" -ne 0 ]; then
  echo "the sweep did not finish (rc $rc; 124 = time budget): rerun this script to --resume"
fi
if [ -n "${TUNE_DIR:-}" ] && [ "$done_runs" -gt 0 ]; then
  $PY tools/gpu/gridrun.py compare "$OUTDIR" "$TUNE_DIR" --json "$SBS/compare.json" \
    | tee "$SBS/compare.md"
fi
if [ -n "${OUT:-}" ]; then  # small files only (run JSONs keep --save-detailed lists: shrunk)
  mkdir -p "$OUT/labrun"
  $PY tools/gpu/collect.py "$SBS" "$OUT/labrun/$NAME"
  $PY tools/gpu/sweep_files.py shrink "$OUT/labrun/$NAME"
fi
exit "$rc"
