#!/usr/bin/env bash
# Stop what a killed lab left holding the GPU (an engine or server orphaned when papermill
# was stopped by a time limit). The lab host runs nothing else: every compute pid that
# nvidia-smi lists was started by our lab run. SIGINT, then SIGKILL after 20 s.
set -uo pipefail
pids=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr -d ' ')
[ -z "$pids" ] && { echo "GPU free"; exit 0; }
echo "GPU still held by: $pids"
for p in $pids; do kill -INT "$p" 2>/dev/null; done
for _ in $(seq 20); do
  sleep 1
  left=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr -d ' ')
  [ -z "$left" ] && { echo "GPU free"; exit 0; }
done
for p in $left; do kill -KILL "$p" 2>/dev/null; done
sleep 3
nvidia-smi --query-compute-apps=pid --format=csv,noheader
