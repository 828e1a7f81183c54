#!/usr/bin/env bash
# Convert's time and memory on a big checkpoint (docs/large-models.md §Streaming convert; figures
# in results/scale.md §Convert): for each layout and --max-shard-size, `cp -r` of the source folder
# and then `convert`, back to back (the same machine state), each under scripts/peak_mem.py (wall
# time, peak anonymous memory, peak RSS).
#   SRC=/path/llama3-8b WORK=/path/scratch [SHARDS="2GB 5GB"] [THREADS=2] [FSYNC=1] bash scripts/convert_scale_bench.sh
# FSYNC=1 adds `convert --fsync` (each file on the disk before it is renamed into place; `cp -r`
# does not wait for the disk).
# SRC: e.g. `python3 scripts/make_test_checkpoint.py --shape llama3-8b ...`. WORK needs the space of
# the source plus its largest output. One JSON line per run on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${SRC:?the source checkpoint folder}
WORK=${WORK:?a scratch folder}
SHARDS=${SHARDS:-"2GB 5GB"}
THREADS=${THREADS:-2}
FSYNC_FLAG=""
[ "${FSYNC:-0}" = 1 ] && FSYNC_FLAG="--fsync"
PY=${PYTHON:-python3}
mkdir -p "$WORK"
declare -A FLAGS=(
  [affine4-mlx]="--scheme affine --bits 4 --group-size 64"
  [int8-ct]="--scheme int8 --format compressed-tensors"
  [nf4-bnb]="--scheme nf4"
)
cat "$SRC"/* > /dev/null  # the source in the page cache for every run alike
for shard in $SHARDS; do
  for row in ${ROWS:-affine4-mlx int8-ct nf4-bnb}; do
    rm -rf "$WORK/copy" "$WORK/out"
    $PY scripts/peak_mem.py --json "$WORK/cp.json" -- cp -r "$SRC" "$WORK/copy"
    rm -rf "$WORK/copy"
    # shellcheck disable=SC2086
    $PY scripts/peak_mem.py --json "$WORK/cv.json" -- build/quanttool convert --in "$SRC" --out "$WORK/out" \
      --max-shard-size "$shard" --threads "$THREADS" $FSYNC_FLAG ${FLAGS[$row]} > "$WORK/convert.log"
    out_bytes=$(du -sb "$WORK/out" | cut -f1)
    $PY - "$row" "$shard" "$out_bytes" "$WORK/cp.json" "$WORK/cv.json" "${FSYNC:-0}" <<'EOF'
import json, sys
row, shard, out_bytes, cp, cv, fsync = sys.argv[1:]
cp, cv = json.load(open(cp)), json.load(open(cv))
print(json.dumps({"row": row, "max_shard_size": shard, "fsync": fsync == "1", "out_bytes": int(out_bytes),
                  "convert_s": cv["wall_s"], "cp_s": cp["wall_s"], "ratio": round(cv["wall_s"] / cp["wall_s"], 3),
                  "peak_anon_bytes": cv["peak_anon_bytes"], "peak_rss_bytes": cv["peak_rss_bytes"], "rc": cv["rc"]}))
EOF
    rm -rf "$WORK/out"
  done
done
