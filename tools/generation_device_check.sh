#!/usr/bin/env bash
# Runs on the GPU machine: `fast-llm generate` against transformers' generate (tools/generation_check.py): identical
# greedy tokens in fp32 on a random-weight Llama-3.2-1B-shaped model, then tokens/s in bf16 at batch 1 and 16 (128
# prompt tokens + 256 new) beside transformers eager and static cache + torch.compile. Builds nothing: it takes the
# staged build (build/device, tools/stage_for_device.sh) or build/cuda. About 5 minutes of GPU time; arguments are
# passed on (e.g. --skip-compile, --layers 4 for a quicker run).
set -euo pipefail
cd "$(dirname "$0")/.."
binary=${FAST_LLM:-}
for candidate in build/device/bin/fast-llm build/cuda/bin/fast-llm; do
  [ -z "$binary" ] && [ -x "$candidate" ] && binary=$candidate
done
if [ -z "$binary" ]; then
  echo "no fast-llm binary: stage a CUDA build (tools/stage_for_device.sh) or set FAST_LLM" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
exec python3 tools/generation_check.py --fast-llm "$binary" "$@"
