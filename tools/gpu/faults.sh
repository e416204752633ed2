#!/usr/bin/env bash
# Issue 6 faults on the real server, one device call (~4-5 min on the H200):
#   bash tools/gpu/faults.sh [RUN_DIR]        (on the GPU host; RUN_DIR default /tmp/labrun)
# One faults run, one RUN_DIR/faults/points.jsonl, written by course_utils.lab.sweep.sweep():
#  0. the invalid combination max_num_batched_tokens 128 < max_num_seqs 256 with the default
#     prevalidate=True: knobs.validate rejects it before any server starts (no GPU time);
#  1. the same combination with prevalidate=False: vLLM starts and fails with its own
#     SchedulerConfig ValueError (vllm/config/scheduler.py verify_max_model_len), recorded
#     as a failed point ("invalid knob combination: ...");
#  2. one sweep of gpu_memory_utilization [0.08, 0.118, 0.9] at max_model_len 32768 (the
#     Qwen2.5-7B config's max_position_embeddings, so vLLM's config check passes):
#     - 0.08: 0.08 x 139.8 GiB (torch's total on the H200, serve.log) = 11.2 GiB < 14.29 GiB
#       of weights: "No available memory for the cache blocks" (v1/core/kv_cache_utils.py);
#     - 0.118: 16.50 GiB - 14.29 weights - 1.35 activation peak and non-torch memory (both
#       logged at 0.92 on 2026-11-29) = ~0.85 GiB of KV (course_utils.core.capacity.fit with
#       those numbers: 15,936 tokens), positive but < the 1.75 GiB one 32,768-token request
#       needs: "To serve at least one request with the model's max seq len (32768) ...";
#     - 0.9: starts and is benched: the sweep went on after the failures.
#  3. the same python again: every point is resumed from points.jsonl, no server starts.
# With FAULTS_INTERRUPT_S=N, step 2 first runs under `timeout -s INT N` (stopped mid-sweep)
# and then again: finished points are not rerun (costs one more start of the point cut).
# Device time: failed starts cost import + load + profile: ~20 s (invalid combination, fails
# at config) and ~45-80 s (memory, fails after the profile run); the good point ~110-130 s
# (start ~70-100 s, warm-up, 120 prompts at 20 req/s, stop). ~4-5 min in all.
# Env: VLLM (vllm), PY (python3), MODEL (/tmp/model-qwen2.5-7b-dummy), GPU_GIB (nvidia-smi),
#   FAULT_KV_GMU (0.118), FAULT_WEIGHTS_GMU (0.08), GOOD_GMU (0.9), FAULTS_PROMPTS (120),
#   FAULTS_RATE (20), FAULTS_TIMEOUT_S (560).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
RUN=${1:-/tmp/labrun}
source tools/gpu/hostenv.sh   # src/ on PYTHONPATH; the staged site on the GPU host
export PY=${PY:-python3}
export FAULTS_VLLM=${VLLM:-vllm} FAULTS_MODEL=${MODEL:-/tmp/model-qwen2.5-7b-dummy} \
  FAULTS_OUT="$RUN/faults" FAULTS_GPU_GIB=${GPU_GIB:-}
LIMIT=${FAULTS_TIMEOUT_S:-560}
mkdir -p "$RUN/faults"
# before any GPU time (the largest gpu_memory_utilization below is the good point's)
"$PY" -m course_utils preflight --model "$FAULTS_MODEL" --vllm-cmd "$FAULTS_VLLM" \
  --load-format dummy --gpu-memory-utilization "${GOOD_GMU:-0.9}" --out "$RUN/faults" || exit 2

run_py() {  # $1 = what to run: all | memory
  FAULTS_STEP=$1 "$PY" - <<'PY'
import json, os, shlex, time
from pathlib import Path

from course_utils.core import knobs
from course_utils.lab.bench import Workload
from course_utils.core.slo import SLO
from course_utils.lab.sweep import load_points, sweep

env = os.environ
out = Path(env["FAULTS_OUT"])
model = env["FAULTS_MODEL"]
gib = float(env["FAULTS_GPU_GIB"]) if env.get("FAULTS_GPU_GIB") else None
w = Workload(input_len=512, output_len=128, num_prompts=int(env.get("FAULTS_PROMPTS", "120")),
             request_rate=float(env.get("FAULTS_RATE", "20")), seed=0, ignore_eos=True)
slo = SLO.parse("ttft:300 tpot:50")
common = dict(workload=w, slo=slo, out_dir=out, early_stop=False, progress=False,
              gpu_memory_gib=gib,
              server_kwargs={"vllm_cmd": shlex.split(env["FAULTS_VLLM"]),
                             "load_format": "dummy", "startup_timeout_s": 300},
              bench_kwargs={"timeout_s": 300})
invalid = {"max_num_seqs": 256, "max_model_len": 4096}
facts: dict = {}
before = len(load_points(out))  # > 0: this run resumes an earlier (maybe interrupted) one
t0 = time.monotonic()
if env["FAULTS_STEP"] == "all":
    try:  # the default: rejected before any server starts
        sweep(model, "max_num_batched_tokens", [128], base_knobs=invalid, **common)
        facts["prevalidate_true"] = "not rejected (unexpected)"
    except knobs.KnobError as exc:
        facts["prevalidate_true"] = f"KnobError before any server start: {exc}"
    print("prevalidate=True:", facts["prevalidate_true"], flush=True)
    sweep(model, "max_num_batched_tokens", [128], base_knobs=invalid, prevalidate=False,
          tag="faults-invalid", **common)
sweep(model, "gpu_memory_utilization",
      [float(env.get("FAULT_WEIGHTS_GMU", "0.08")), float(env.get("FAULT_KV_GMU", "0.118")),
       float(env.get("GOOD_GMU", "0.9"))],
      base_knobs={"max_model_len": 32768}, tag="faults-memory", **common)
pts = load_points(out)
summary = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "wall_s": round(time.monotonic() - t0, 1),
           **facts,
           "points": [{"tag": p.get("tag"), "knobs": p["knobs"], "status": p["status"],
                       "reason": p.get("reason"), "elapsed_s": p.get("elapsed_s"),
                       "startup_s": p.get("startup_s"),
                       "request_goodput": (p.get("score") or {}).get("request_goodput")}
                      for p in pts],
           "failed": sum(p["status"] == "failed" for p in pts),
           "ok": sum(p["status"] == "ok" for p in pts)}
old = json.loads((out / "faults.json").read_text()) if (out / "faults.json").exists() else {}
summary["runs"] = old.get("runs", []) + [{"step": env["FAULTS_STEP"], "wall_s": summary["wall_s"],
                                          "points_before": before, "points_after": len(pts)}]
summary.setdefault("prevalidate_true", old.get("prevalidate_true"))
(out / "faults.json").write_text(json.dumps(summary, indent=1))
for p in summary["points"]:
    print(f"{p['status']:6} {json.dumps(p['knobs'])}: {p['reason'] or 'request goodput %.2f' % (p['request_goodput'] or 0)}"
          f"  ({p['elapsed_s']} s)")
print(f"{summary['failed']} failed + {summary['ok']} ok in {out / 'points.jsonl'}")
PY
}

stamp() { echo "$(date -u +%FT%TZ) $*" | tee -a "$RUN/commands.log"; }
stamp "faults.sh start (vllm: $FAULTS_VLLM)"
t0=$(date +%s)
if [ -n "${FAULTS_INTERRUPT_S:-}" ]; then
  FAULTS_STEP=memory timeout --signal=INT --kill-after=30 "$FAULTS_INTERRUPT_S" \
    bash -c "$(declare -f run_py); run_py memory"
  stamp "faults: interrupted after ${FAULTS_INTERRUPT_S}s (rc $?); resuming"
fi
timeout --signal=INT --kill-after=30 "$LIMIT" bash -c "$(declare -f run_py); run_py all" \
  2>&1 | tee -a "$RUN/faults/faults.log"
rc=${PIPESTATUS[0]}
stamp "faults: sweep rc=$rc wall=$(( $(date +%s) - t0 ))s"
if [ "$rc" -eq 0 ]; then  # again: everything resumed, no server starts
  run_py all 2>&1 | tail -2 | tee -a "$RUN/faults/faults.log"
  stamp "faults: rerun resumed every point (rc ${PIPESTATUS[0]})"
fi
command -v nvidia-smi >/dev/null && bash tools/gpu/cleanup_gpu.sh
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT/labrun"
  "$PY" tools/gpu/collect.py "$RUN/faults" "$OUT/labrun/faults"
  cp "$RUN/commands.log" "$OUT/labrun/" 2>/dev/null
fi
exit "$rc"
