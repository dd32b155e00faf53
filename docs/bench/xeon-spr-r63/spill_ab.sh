#!/usr/bin/env bash
# The cost suite with TALON's kernel before and after a change, alternating, ROUNDS rounds (each switch
# rebuilds the kernel, about 30 s): the source files given, the working tree's kernel put back at the end.
#   bash docs/bench/xeon-spr-r63/spill_ab.sh BEFORE.cpp AFTER.cpp ROUNDS OUTDIR
set -euo pipefail
before=$1 after=$2 rounds=$3 out=$4
kernel=talon/models/csrc/stream_gemm.cpp
keep=$(mktemp); cp "$kernel" "$keep"
trap 'cp "$keep" "$kernel"' EXIT
for round in $(seq 1 "$rounds"); do
  order="before after"; [ $((round % 2)) -eq 0 ] && order="after before"
  for v in $order; do
    src=$before; [ "$v" = after ] && src=$after
    cp "$src" "$kernel"
    PYTHONPATH=. python -m talon.bench --suite cost --out-dir "$out/${v}_$round" > "$out/${v}_$round.log" 2>&1
    echo "$v $round: $(grep -E '^target,(8|16|32|64),' "$out/${v}_$round/cost.csv" | awk -F, '{printf "verify(%s) %.3f  ", $2, $5}')plain step $(grep -E '^ar,' "$out/${v}_$round/cost.csv" | awk -F, '{printf "%.1f ms", $4 * 1000}')"
  done
done
