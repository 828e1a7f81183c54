#!/usr/bin/env bash
# The tree follows .clang-format: every tracked C++/CUDA source, as clang-format would write it.
# Usage: scripts/check_format.sh [REPO]   (exit 1 listing the files that differ)
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
command -v clang-format >/dev/null || { echo "error: clang-format not installed (scripts/setup.sh installs it)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' '*.inc' | grep -v '^data/')
bad=0
for f in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then echo "not formatted: $f"; bad=1; fi
done
[ $bad = 0 ] && echo "format ok: ${#files[@]} files"
exit $bad
