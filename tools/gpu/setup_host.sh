#!/usr/bin/env bash
# On the offline GPU host, from the repo root: collect one carried wheel part, and once all
# have arrived install them (../shared/offline-gpu kit) and put the dummy model folder in /tmp.
#   bash tools/gpu/setup_host.sh NPARTS      (every transfer call; NPARTS = parts staged)
# The call that carries the last part must also carry .stage/install.sh and
# .gpu/model-qwen2.5-7b-dummy. Prints what is still missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
want=${1:?usage: setup_host.sh NPARTS}
mkdir -p /tmp/parts
[ -f /tmp/.session_t0 ] || date +%s > /tmp/.session_t0  # session_trace.sh counts from here
for p in .stage/part-*; do
  [ -f "$p" ] && cp -f "$p" /tmp/parts/ && echo "got $(basename "$p") ($(stat -c %s "$p") bytes)"
done
have=$(ls /tmp/parts/part-* 2>/dev/null | wc -l)
echo "parts on host: $have of $want"
if [ "$have" -lt "$want" ]; then exit 0; fi
if [ ! -f .stage/install.sh ]; then echo "all parts here: carry .stage/install.sh to install"; exit 0; fi
bash .stage/install.sh
for m in .gpu/model-*; do
  [ -d "$m" ] && rm -rf "/tmp/$(basename "$m")" && cp -r "$m" /tmp/ && echo "model folder: /tmp/$(basename "$m")"
done
ls /tmp/model-* >/dev/null 2>&1 || echo "WARNING: no model folder carried (.gpu/model-qwen2.5-7b-dummy)"
