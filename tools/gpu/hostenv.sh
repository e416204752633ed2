# Sourced by the tools/gpu scripts on the offline GPU host: the staged site (install.sh
# --env, same exports) plus the repo's src/ so course_utils imports without installing.
_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PYTHONPATH="/tmp/site:${_ROOT}/src" PATH="/tmp/site/bin:$PATH" HF_HUB_OFFLINE=1 \
  TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 VLLM_USE_FLASHINFER_SAMPLER=0 \
  PYTHONUNBUFFERED=1 MPLBACKEND=Agg
