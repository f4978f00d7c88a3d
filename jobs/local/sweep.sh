# sweep.sh — sourced by jobs/local/{strong,weak}_scaling.sh: one deck on 1, 2, 4 ranks, then rt-report.
#
# rt_sweep KIND DECK [RINGTRAIN ARGS...]
#   KIND is strong or weak (only names the sweep; the deck decides what is held fixed).
#   Writes output/<sweep>/<deck>-np<N>.h5 for each N in $NPS (default "1 2 4"; past the core
#   count the ranks are oversubscribed), each with --output.baseline at the smallest-N file,
#   then runs tools/rt-report on the sweep directory (table, table.md, table.jsonl, PNGs).
# Settings (environment): NPS, SWEEP (default <kind>-<deck>), OUT (default output), PYTHON.
# shellcheck shell=bash
# shellcheck source=jobs/local/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PYTHON=${PYTHON:-/usr/bin/python3}

rt_sweep() {
  local kind=$1 deck=$2; shift 2
  [ -f "$deck" ] || { echo "${kind}_scaling: no deck $deck" >&2; return 2; }
  local name; name=$(basename "$deck" .deck)
  local nps=${NPS:-1 2 4}
  local dir=${OUT:-output}/${SWEEP:-$kind-$name}
  mkdir -p "$dir"
  local first baseline=() np
  first=$(tr ' ' '\n' <<<"$nps" | grep . | sort -n | head -1)
  echo "== $kind scaling sweep of $deck on ${nps// /, } ranks -> $dir/ ($(nproc) cores here)"
  for np in $(tr ' ' '\n' <<<"$nps" | grep . | sort -n); do
    # A shared machine's load skews every figure: say what it was.
    echo "-- $np rank(s): $dir/$name-np$np.h5 (log $dir/$name-np$np.log; load average $(cut -d' ' -f1 /proc/loadavg))"
    rt_mpirun "$np" "$BIN/ringtrain" --deck "$deck" --output.dir="$dir" \
      --output.name="$name-np$np" "${baseline[@]}" "$@" >"$dir/$name-np$np.log" 2>&1 || {
      tail -n 5 "$dir/$name-np$np.log" >&2
      echo "${kind}_scaling: the $np-rank run failed (log $dir/$name-np$np.log)" >&2
      return 1
    }
    grep '^summary:' "$dir/$name-np$np.log" | sed 's/^/   /'
    [ "$np" = "$first" ] && baseline=(--output.baseline="$dir/$name-np$first.h5")
  done
  echo "== rt-report $dir"
  "$PYTHON" tools/rt-report "$dir"
}
