#!/usr/bin/env bash
# The same A/B on the 2-core CPU (8 of the 30 prompts; the cached cost curves, the same for both codes):
# .old/talon is `git archive f6b5f47 talon` (with a link .old/assets -> ../assets).
cd "$(dirname "$0")/../../.."
for run in old1 new1 new2 old2; do
  code=.; [[ $run == old* ]] && code=.old
  PYTHONPATH=$code python docs/bench/gpu-host-work-h200/ab.py docs/bench/host-work-cpu-epyc-zen4/cpu_$run.json cpu-$run 8 2>&1 | grep -v Loading
done
