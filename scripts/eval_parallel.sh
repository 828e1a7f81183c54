#!/usr/bin/env bash
# One eval-ppl run split into parts that GNU parallel runs at once — local processes or ssh hosts —
# then merged into exactly the single run's JSON (eval-ppl --merge sums the per-position figures).
#
#   scripts/eval_parallel.sh --parts P --chunks N --json OUT.json [--sshloginfile HOSTS] [--jobs J]
#                            -- EVAL-PPL ARGS (--model M --text T ...)
#
# Part i evaluates chunks [i*ceil(N/P), ...) with `--chunk-offset --chunks --token-stats --json`.
# With --sshloginfile every host must see the same paths (a shared file system) and have
# QUANTTOOL (default: this checkout's build/quanttool) at that path; parts come back through it.
# PARTS_DIR (default: OUT.json.parts/) keeps the parts, so a failed part can be rerun by hand.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
QUANTTOOL=${QUANTTOOL:-$here/build/quanttool}
parts="" chunks="" out="" ssh=() jobs=""
while (($#)); do
  case $1 in
    --parts) parts=$2; shift 2 ;;
    --chunks) chunks=$2; shift 2 ;;
    --json) out=$2; shift 2 ;;
    --sshloginfile) ssh=(--sshloginfile "$2"); shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "error: unknown option $1 (eval-ppl's own arguments go after --)" >&2; exit 2 ;;
  esac
done
if [[ -z $parts || -z $chunks || -z $out ]]; then
  echo "error: --parts, --chunks and --json are required" >&2; exit 2
fi
if ! [[ $parts =~ ^[1-9][0-9]*$ && $chunks =~ ^[1-9][0-9]*$ ]]; then
  echo "error: --parts and --chunks must be positive integers" >&2; exit 2
fi
command -v parallel >/dev/null || { echo "error: GNU parallel is not installed (apt-get install parallel)" >&2; exit 2; }
per=$(( (chunks + parts - 1) / parts ))
dir=${PARTS_DIR:-$out.parts}
mkdir -p "$dir"
# One line per part: offset and count; the last part takes what is left.
plan=()
for ((o = 0; o < chunks; o += per)); do plan+=("$o $(( o + per <= chunks ? per : chunks - o ))"); done
# -q: eval-ppl's arguments reach it as given (paths with spaces too). Each part prints its summary
# into parts.log; give eval-ppl --threads so that local jobs do not oversubscribe the cores.
printf '%s\n' "${plan[@]}" |
  parallel -q --colsep ' ' --halt now,fail=1 "${ssh[@]}" ${jobs:+-j "$jobs"} \
    "$QUANTTOOL" eval-ppl "$@" --chunk-offset {1} --chunks {2} --token-stats --json "$dir/part-{1}.json" \
    > "$dir/parts.log" 2>&1 || { echo "error: a part failed; see $dir/parts.log" >&2; exit 1; }
"$QUANTTOOL" eval-ppl --merge "$dir"/part-*.json --json "$out"
