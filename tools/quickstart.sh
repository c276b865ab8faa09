#!/usr/bin/env bash
# The main job, from raw text to a model that writes, on this machine alone: installs what is missing, builds fast-llm
# (CPU), trains a BPE tokenizer on the machine's own text files, writes that text as JSON Lines and tokenizes it with
# Fast-LLM's preparation config (examples/quickstart-prepare.yaml), trains a small Llama-architecture model on it for a
# few minutes (examples/quickstart.yaml, exported in Llama format), and ends with what the model writes from a prompt.
# Extra arguments are training overrides, e.g. `bash tools/quickstart.sh training.train_iters=60`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_dependencies.sh
cmake --preset cpu >/dev/null
cmake --build --preset cpu -j "$(nproc)" --target fast_llm_cli
fast_llm=build/cpu/bin/fast-llm
experiment=experiments/quickstart
if [ ! -f "$experiment/tokenizer/tokenizer.json" ]; then
  "$fast_llm" prepare bpe_tokenizer --output "$experiment/tokenizer" --vocab-size 4096 --max-bytes 16000000
fi
if [ ! -f "$experiment/dataset/fast_llm_config_training.yaml" ]; then
  "$fast_llm" prepare text_corpus --output "$experiment/corpus.jsonl" --max-bytes 16000000
  "$fast_llm" prepare gpt_memmap -c examples/quickstart-prepare.yaml
fi
"$fast_llm" train gpt -c examples/quickstart.yaml "$@"
run=$(ls -d "$experiment"/runs/*/ | tail -1)
export=$(ls -d "$experiment"/export/llama/*/ | sort -t/ -k5 -n | tail -1)
echo "metrics: ${run}metrics.jsonl"
echo "== what the model writes (${export}):"
# The log goes to a file so that it does not interleave with the streamed text; it is shown if generation fails.
if ! "$fast_llm" generate --pretrained "$export" --tokenizer "$experiment/tokenizer" --max-new-tokens 80 \
    --temperature 0.7 --top-p 0.9 --seed 1 --prompt "Permission is hereby granted" --stream 2> "$experiment/generate.log"; then
  cat "$experiment/generate.log" >&2
  exit 1
fi
