#!/usr/bin/env bash
# `fast-llm prepare gpt_memmap` end to end (read JSON Lines, tokenize, write shards and configs) on text this machine
# already has, with 1 thread and with every core. Usage: benchmarks/prepare_benchmark.sh TOKENIZER [MEGABYTES]
# TOKENIZER: a tokenizer.json or a folder holding one (e.g. Llama 3's from tools/install_tokenizer_references.sh).
# The corpus: this repository's sources and docs and /usr/share/common-licenses, one JSON line per 2000+ bytes,
# repeated up to MEGABYTES (default 32), written once to build/prepare_benchmark/corpus.jsonl (also gzip and zstd).
set -euo pipefail
cd "$(dirname "$0")/.."
tokenizer=$1
megabytes=${2:-32}
work=build/prepare_benchmark
mkdir -p "$work"
python3 - "$work/corpus.jsonl" "$megabytes" <<'PYTHON'
import json, pathlib, sys
out, megabytes = sys.argv[1], int(sys.argv[2])
texts = []
for root in ["src", "docs", "/usr/share/common-licenses"]:
    for path in sorted(pathlib.Path(root).rglob("*")):
        if path.is_file():
            try:
                texts.append(path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, OSError):
                pass
documents, current = [], ""
for text in texts:
    for paragraph in text.split("\n\n"):
        current += paragraph + "\n\n"
        if len(current) >= 2000:
            documents.append(current)
            current = ""
size, lines = 0, []
while size < megabytes << 20:
    for document in documents:
        lines.append(json.dumps({"text": document}, ensure_ascii=False))
        size += len(document.encode())
        if size >= megabytes << 20:
            break
pathlib.Path(out).write_text("\n".join(lines) + "\n", encoding="utf-8")
print(f"corpus: {len(lines)} documents, {size / 2**20:.1f} MiB of text")
PYTHON
gzip -kf "$work/corpus.jsonl"
zstd -qf "$work/corpus.jsonl" -o "$work/corpus.jsonl.zst"
for input in corpus.jsonl corpus.jsonl.gz corpus.jsonl.zst; do
  for workers in 1 "$(nproc)"; do
    rm -rf "$work/out"
    start=$(date +%s%N)
    build/cpu/bin/fast-llm prepare gpt_memmap dataset.path="$work/$input" tokenizer.path="$tokenizer" \
      output_path="$work/out" num_workers="$workers" 2>&1 | grep "Prepared"
    end=$(date +%s%N)
    echo "$input, $workers thread(s): $(( (end - start) / 1000000 )) ms wall (with the counting pass and tokenizer load)"
  done
done
