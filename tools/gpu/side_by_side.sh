#!/usr/bin/env bash
# Issue 6 side by side, vLLM's half: vLLM 0.26.0's own `vllm bench sweep serve` on lab 02's
# grid and workload (our half is lab 02's tune(): RUN_DIR/slo). One device call (< 10 min);
# a call stopped by its time limit is resumed by the next with vLLM's own --resume.
#   bash tools/gpu/side_by_side.sh [RUN_DIR]          (on the GPU host; RUN_DIR /tmp/labrun)
# Writes RUN_DIR/sidebyside/: vllm_sweep/grid/SERVE--max_num_seqs=V/run=0.json (+summary.json,
# summary.csv), serve_params.json, bench_cmd.txt, sweep-<n>.log (timestamped), timing.json,
# and, when RUN_DIR/slo holds a tune() run, compare.md / compare.json.
# Env (defaults are the H200 run; the CPU check in NEXT_RUN.md overrides them):
#   VLLM         the sweeper and `vllm bench serve` client (vllm)
#   SERVE_VLLM   the `vllm serve` executable in --serve-cmd (vllm; must end in "vllm" for the
#                sweep's own cache reset, vllm/benchmarks/sweep/server.py reset_caches)
#   MODEL (/tmp/model-qwen2.5-7b-dummy)  GRID (64,128,256,1024)  RATE (45)  PROMPTS (600)
#   GPU_GIB (140: 0.26.0 defaults of a >= 70 GiB GPU, for the coupling)
#   AFTER_BENCH_CMD (empty: vLLM resets the prefix cache itself; the fake server has no
#                dev routes, so the CPU check passes "true")
#   SBS_TIMEOUT_S (540)  READY_TIMEOUT_S (420)  SLO_SPEC ("ttft:300 tpot:50")
#   WARMUPS      `vllm bench serve --num-warmups` (8: our harness's warmup_prompts; 0 = none,
#                a cold measured run: the 2026-11-29b H200 run paid a Triton JIT inside it)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
RUN=${1:-/tmp/labrun}
source tools/gpu/hostenv.sh   # src/ on PYTHONPATH; the staged site on the GPU host
# the sweep starts its servers with it too (server.py); needed for POST /reset_prefix_cache
export VLLM_SERVER_DEV_MODE=1
VLLM=${VLLM:-vllm}
SERVE_VLLM=${SERVE_VLLM:-vllm}
PY=${PY:-python3}
MODEL=${MODEL:-/tmp/model-qwen2.5-7b-dummy}
GRID=${GRID:-64,128,256,1024}
RATE=${RATE:-45}
PROMPTS=${PROMPTS:-600}
GPU_GIB=${GPU_GIB:-140}
SLO_SPEC=${SLO_SPEC:-ttft:300 tpot:50}
WARMUPS=${WARMUPS:-8}
LIMIT=${SBS_TIMEOUT_S:-540}
READY=${READY_TIMEOUT_S:-420}
SBS="$RUN/sidebyside"
OUTDIR="$SBS/vllm_sweep"
EXP=grid
mkdir -p "$SBS"

# one port for the whole sweep: each combo's server is SIGKILLed before the next starts
PORT=$($PY -c 'from course_utils.lab.server import free_port; print(free_port())')
# before any GPU time: the serving vllm, GPU, driver, memory, model, this port, disk
$PY -m course_utils preflight --model "$MODEL" --vllm-cmd "$SERVE_VLLM" --port "$PORT" \
  --load-format dummy --out "$SBS" || exit 2
$PY -m course_utils.lab.sidebyside params --knob max_num_seqs --values "$GRID" \
  --gpu-memory-gib "$GPU_GIB" "$SBS/serve_params.json" || exit 2
# lab 02's workload (labs/02_slo_loop.ipynb via run_lab.sh slo): 512 in / 128 out, seed 0,
# --ignore-eos, --goodput from the SLO, --save-detailed; without the flags the sweep appends.
# Warm-up like ours, close but not identical: vLLM 0.26.0 (vllm/benchmarks/serve.py
# benchmark()) sends WARMUPS copies of the first dataset request (512 in / 128 out, server
# sampling defaults) concurrently, prints "Warming up with N requests...", then starts the
# clock; our harness (course_utils.lab.bench.warmup) sends 8 concurrent distinct ~512-token
# completions with max_tokens 16. The sweep passes --num-warmups through untouched
# (vllm/benchmarks/sweep/serve.py run_benchmark only appends its result flags).
BENCH_CMD=$($PY -m course_utils.lab.sidebyside bench-cmd --model "$MODEL" \
  --base-url "http://127.0.0.1:$PORT" --vllm-cmd "$VLLM" --rate "$RATE" \
  --num-prompts "$PROMPTS" --input-len 512 --output-len 128 --seed 0 --slo "$SLO_SPEC" \
  --num-warmups "$WARMUPS") || exit 2
# lab 02's server: run_point's VllmServer argv (max_model_len 4096, dummy weights, seed 0)
SERVE_CMD="$SERVE_VLLM serve $MODEL --max-model-len 4096 --host 127.0.0.1 --port $PORT --load-format dummy --seed 0"
echo "$BENCH_CMD" > "$SBS/bench_cmd.txt"
echo "$SERVE_CMD" > "$SBS/serve_cmd.txt"

RESUME=()
[ -d "$OUTDIR/$EXP" ] && RESUME=(--resume)   # an earlier call started it: vLLM's own resume
CMD=($VLLM bench sweep serve --serve-cmd "$SERVE_CMD" --bench-cmd "$BENCH_CMD"
     --serve-params "$SBS/serve_params.json" -o "$OUTDIR" -e "$EXP" --num-runs 1
     --server-ready-timeout "$READY" --show-stdout "${RESUME[@]}")
[ -n "${AFTER_BENCH_CMD:-}" ] && CMD+=(--after-bench-cmd "$AFTER_BENCH_CMD")
N=$(( $(ls "$SBS"/sweep-*.log 2>/dev/null | wc -l) + 1 ))
LOG="$SBS/sweep-$N.log"
echo "$(date -u +%FT%TZ) $ $(printf '%q ' "${CMD[@]}")" | tee -a "$RUN/commands.log" "$SBS/commands.log"
t0=$EPOCHREALTIME
# every line stamped with its Unix time: course_utils.lab.sidebyside.parse_sweep_log reads the
# [BEGIN SERVER] / [BEGIN BENCHMARK] / [END SERVER] markers of vllm/benchmarks/sweep/serve.py
timeout --signal=INT --kill-after=30 "$LIMIT" "${CMD[@]}" 2>&1 \
  | while IFS= read -r line || [ -n "$line" ]; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done > "$LOG"
rc=${PIPESTATUS[0]}
wall=$($PY -c "print(round($EPOCHREALTIME - $t0, 2))")
echo "$(date -u +%FT%TZ) side_by_side call $N rc=$rc wall=${wall}s" | tee -a "$RUN/commands.log" "$SBS/commands.log"
$PY -m course_utils.lab.sidebyside timing "$LOG" "$SBS/timing.json" --call-wall-s "$wall" --rc "$rc"
# (a marker may be glued to output without a newline; warm-up and JIT lines: compare.md)
grep -E "^[0-9.]+ (.*\[(BEGIN|END|SKIPPED) [A-Z]+\]|Server overrides|Warming up with|Experiment has been saved|RuntimeError|.*Error|.*JIT compilation during inference)" "$LOG" | tail -40
done_runs=$(ls "$OUTDIR/$EXP"/SERVE-*/run=0.json 2>/dev/null | wc -l)
echo "combos with a result: $done_runs of $(( $(tr -cd ',' <<< "$GRID" | wc -c) + 1 ))"
if [ "$rc" -ne 0 ]; then
  echo "the sweep did not finish (rc $rc; 124 = time limit): rerun this script to --resume"
fi
command -v nvidia-smi >/dev/null && bash tools/gpu/cleanup_gpu.sh
if [ -s "$RUN/slo/tune.jsonl" ] && [ "$done_runs" -gt 0 ]; then
  $PY -m course_utils.lab.sidebyside compare "$OUTDIR" "$RUN/slo" --slo "$SLO_SPEC" \
    --timing "$SBS/timing.json" --bench-cmd "$SBS/bench_cmd.txt" --json "$SBS/compare.json" \
    | tee "$SBS/compare.md"
fi
if [ -n "${OUT:-}" ]; then  # small files only (run JSONs keep --save-detailed lists: shrunk)
  mkdir -p "$OUT/labrun"
  $PY tools/gpu/collect.py "$SBS" "$OUT/labrun/sidebyside"
  $PY -m course_utils.lab.sidebyside shrink "$OUT/labrun/sidebyside"
fi
exit "$rc"
