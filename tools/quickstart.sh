#!/usr/bin/env bash
# The main job: installs what is missing, builds fast-llm (CPU), turns text files already on this machine into a
# byte-level dataset, and trains a small Llama-architecture model on it for a few minutes (examples/quickstart.yaml).
# Extra arguments are overrides, e.g. `bash tools/quickstart.sh training.train_iters=50`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_dependencies.sh
cmake --preset cpu >/dev/null
cmake --build --preset cpu -j "$(nproc)" --target fast_llm_cli
experiment=experiments/quickstart
if [ ! -f "$experiment/corpus/fast_llm_config.yaml" ]; then
  build/cpu/bin/fast-llm prepare byte_corpus --output "$experiment/corpus" --max-bytes 16000000
fi
build/cpu/bin/fast-llm train gpt -c examples/quickstart.yaml "$@"
echo "metrics: $(ls -d "$experiment"/runs/*/ | tail -1)metrics.jsonl"
