# Sourced by every tools/gpu script: the repo's src/ on PYTHONPATH so course_utils imports
# without installing, and, on the offline GPU host, the staged site (install.sh --env, same
# exports) in front of it. Without /tmp/site (the CPU checks against fakes) the caller's
# PYTHONPATH and PATH are kept.
_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [ -d /tmp/site ]; then
  export PYTHONPATH="/tmp/site:${_ROOT}/src" PATH="/tmp/site/bin:$PATH"
else
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}${_ROOT}/src"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
  VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 MPLBACKEND=Agg
# NVLink multicast stays off on every multi-GPU host (it can take a shared host's GPUs out of
# service); harmless on one GPU. vLLM's symmetric-memory all-reduce needs multicast: off too.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
  VLLM_ALLREDUCE_USE_SYMM_MEM=0
# pack_folder SRC NAME [grid]: SRC shrunk by collect.py (a grid's run files also by
# sweep_files.py) as $OUT/NAME.tgz holding NAME/; written aside, then renamed, so that a call
# cut mid-tar keeps the last whole archive (a device call returns files 2 folders deep at most)
pack_folder() {
  local src=$1 name=$2 pack rc=0
  pack=$(mktemp -d)
  "${PY:-python3}" "$_ROOT/tools/gpu/collect.py" "$src" "$pack/$name" > /dev/null || rc=$?
  if [ "$rc" -eq 0 ] && [ "${3:-}" = grid ]; then
    "${PY:-python3}" "$_ROOT/tools/gpu/sweep_files.py" shrink "$pack/$name" > /dev/null || rc=$?
  fi
  if [ "$rc" -eq 0 ]; then
    tar czf "$OUT/.$name.tgz.part" -C "$pack" "$name" \
      && mv -f "$OUT/.$name.tgz.part" "$OUT/$name.tgz" || rc=$?
  fi
  rm -rf "$pack"
  return "$rc"
}
