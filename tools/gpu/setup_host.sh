#!/usr/bin/env bash
# On the offline GPU host, from the repo root: collect one carried wheel part, and once all
# have arrived install them (../shared/offline-gpu kit) and put the dummy model folder in /tmp.
#   bash tools/gpu/setup_host.sh NPARTS      (every transfer call; NPARTS = parts staged)
# The call that carries the last part must also carry .stage/install.sh and
# .gpu/model-qwen2.5-7b-dummy. Prints what is still missing; a call that carries the installer
# exits 2 while a part is missing, so a job chained after it (`setup_host.sh N && job`) does
# not start. HOST_TMP (default /tmp) is where parts, the session's start and the model go.
set -euo pipefail
cd "$(dirname "$0")/../.."
want=${1:-}
if ! [[ "$want" =~ ^[1-9][0-9]*$ ]]; then
  echo "error: NPARTS '$want' is not a count of parts → fix: bash tools/gpu/setup_host.sh 11 (the parts staged in .stage/)"
  exit 2
fi
T=${HOST_TMP:-/tmp}
mkdir -p "$T/parts"
[ -f "$T/.session_t0" ] || date +%s > "$T/.session_t0"  # session_trace.sh counts from here
for p in .stage/part-*; do
  [ -f "$p" ] && cp -f "$p" "$T/parts/" && echo "got $(basename "$p") ($(stat -c %s "$p") bytes)"
done
have=$(find "$T/parts" -maxdepth 1 -name 'part-*' | wc -l)
echo "parts on host: $have of $want"
if [ "$have" -lt "$want" ]; then
  [ -f .stage/install.sh ] || exit 0  # a transfer call: the next part follows
  missing=$(for i in $(seq 0 $((want - 1))); do
    f=$(printf 'part-%02d' "$i"); [ -f "$T/parts/$f" ] || printf '%s ' "$f"; done)
  echo "error: $have of $want parts on the host, missing: ${missing% } → fix: send each missing part in its own call, then this call again"
  exit 2
fi
if [ ! -f .stage/install.sh ]; then echo "all parts here: carry .stage/install.sh to install"; exit 0; fi
PARTS="$T/parts" bash .stage/install.sh
for m in .gpu/model-*; do
  [ -d "$m" ] && rm -rf "$T/$(basename "$m")" && cp -r "$m" "$T/" && echo "model folder: $T/$(basename "$m")"
done
ls "$T"/model-* >/dev/null 2>&1 || echo "WARNING: no model folder carried (.gpu/model-qwen2.5-7b-dummy)"
