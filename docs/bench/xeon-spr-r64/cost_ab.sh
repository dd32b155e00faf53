#!/usr/bin/env bash
# The cost suite of an older revision (a worktree, its C++ built in its own extensions folder) and of this
# working tree, alternating, ROUNDS rounds, each run its own process:
#   git worktree add /tmp/before REV
#   bash docs/bench/xeon-spr-r64/cost_ab.sh /tmp/before ROUNDS OUTDIR
set -euo pipefail
before=$1 rounds=$2 out=$(realpath -m "$3")
here=$(pwd)
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  order="before after"; [ $((round % 2)) -eq 0 ] && order="after before"
  for v in $order; do
    dir=$here; [ "$v" = before ] && dir=$before
    (
      cd "$dir"
      [ "$v" = before ] && export TORCH_EXTENSIONS_DIR=$before/.ext
      PYTHONPATH=. python -m talon.bench --suite cost --out-dir "$out/${v}_$round" > "$out/${v}_$round.log" 2>&1
    )
    echo "$v $round: $(grep -E '^target,(8|16|32|64),' "$out/${v}_$round/cost.csv" | awk -F, '{printf "verify(%s) %.3f  ", $2, $5}')plain step $(grep -E '^ar,' "$out/${v}_$round/cost.csv" | awk -F, '{printf "%.1f ms", $4 * 1000}')"
  done
done
