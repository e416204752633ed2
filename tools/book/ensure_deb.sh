#!/usr/bin/env bash
# Install the named Debian packages that are missing: one `apt-get update`, then install.
# Used by `make book` (fonts-noto-cjk) and `make test` (chromium). Needs root (or sudo).
set -euo pipefail
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
echo "ensure_deb: installing ${missing[*]}"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
