#!/usr/bin/env bash
# The cost suite with the decoder weights streamed as their exact 4-bit codes (the default) and as float32
# ($TALON_WEIGHT_CODES=off), alternating, ROUNDS rounds, each run its own process:
#   bash docs/bench/xeon-spr-r65/codes_ab.sh ROUNDS OUTDIR
set -euo pipefail
rounds=$1 out=$(realpath -m "$2")
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  order="codes float32"; [ $((round % 2)) -eq 0 ] && order="float32 codes"
  for v in $order; do
    mode=auto; [ "$v" = float32 ] && mode=off
    TALON_WEIGHT_CODES=$mode PYTHONPATH=. python -m talon.bench --suite cost --out-dir "$out/${v}_$round" > "$out/${v}_$round.log" 2>&1
    echo "$v $round: $(grep -E '^target,(4|8|16|32|64),' "$out/${v}_$round/cost.csv" | awk -F, '{printf "verify(%s) %.3f  ", $2, $5}')plain step $(grep -E '^ar,' "$out/${v}_$round/cost.csv" | awk -F, '{printf "%.1f ms", $4 * 1000}')"
  done
done
