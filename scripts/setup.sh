#!/usr/bin/env bash
# Install the Debian packages quanttool builds with. Idempotent: does nothing when all are there.
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config libcli11-dev nlohmann-json3-dev libfmt-dev zlib1g-dev
      libeigen3-dev libopenblas-openmp-dev libgtest-dev libpcre2-dev python3 python3-pip unzip parallel
      clang-format)
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
