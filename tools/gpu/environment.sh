#!/usr/bin/env bash
# Write RUN_DIR/environment: GPU (nvidia-smi), driver, CUDA, torch and vLLM versions, the
# labs' parameters (params.json) and the commands run (commands.log). Run it on the GPU host
# after the labs, in the same device call as the last one (or any call while /tmp stays).
#   bash tools/gpu/environment.sh [RUN_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
RUN=${1:-/tmp/labrun}
source tools/gpu/hostenv.sh
mkdir -p "$RUN"
F="$RUN/environment"
{
  echo "# environment of the lab run ($(date -u +%FT%TZ), host $(hostname))"
  echo "## nvidia-smi"; nvidia-smi 2>&1
  echo "## versions"
  python3 - <<'PY'
import json, platform, sys
sys.path.insert(0, "src")
from course_utils.lab import replay as labtools
env = labtools.environment()
print(json.dumps(env, indent=1))
PY
  echo "## packages"
  python3 -m pip list --path /tmp/site 2>/dev/null \
    | grep -iE '^(vllm|torch|transformers|tokenizers|xformers|triton|papermill|ipykernel|numpy) ' || true
  echo "## note"
  echo "Weights: load_format=dummy (random weights on the Qwen2.5-7B-Instruct config.json"
  echo "shipped in course_utils, tokenizer from course_utils.lab.modelfolder): speed, memory and"
  echo "KV-cache size are real; generated text and accuracy are not measured."
  for p in "$RUN"/*/params.json; do
    [ -f "$p" ] && { echo "## parameters: $p"; cat "$p"; echo; }
  done
  echo "## commands"; cat "$RUN/commands.log" 2>/dev/null
} > "$F" 2>&1
echo "wrote $F ($(wc -l < "$F") lines)"
[ -n "${OUT:-}" ] && mkdir -p "$OUT/labrun" && cp "$F" "$RUN/commands.log" "$OUT/labrun/" 2>/dev/null
exit 0
