#!/usr/bin/env bash
# CPU training step, fast-llm against PyTorch (Debian's python3-torch) on the same Llama-shaped model and batch:
# the foundation issue's seed configuration shrunk by overrides (2 blocks, hidden 256, 8 heads in 2 groups of size 32,
# SwiGLU 512, vocab 32000, 2048 tokens per step, fp32). Both use every core. Prints the median step time of each and
# the ratio; the first steps (allocation, warm-up) are left out of both.
#   bash benchmarks/cpu_training_step.sh [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
binary=${FAST_LLM_BINARY:-build/cpu/bin/fast-llm}
steps=${1:-10}
threads=$(nproc)
experiment=$(mktemp -d)
trap 'rm -rf "$experiment"' EXIT

OMP_NUM_THREADS=$threads "$binary" train gpt -c examples/mistral-7b.yaml \
  model.base_model.decoder.num_blocks=2 model.base_model.hidden_size=256 \
  model.base_model.decoder.block.mixer.heads=8 model.base_model.decoder.block.mixer.head_groups=2 \
  model.base_model.decoder.block.mixer.head_size=32 model.base_model.decoder.block.mlp.intermediate_size=512 \
  model.base_model.decoder.block.mixer.window_size=null data.micro_batch_size=2048 \
  model.distributed.compute_dtype=fp32 training.train_iters="$steps" training.logs.interval=1 \
  run.experiment_dir="$experiment" >"$experiment/fast_llm.log" 2>&1 || { cat "$experiment/fast_llm.log"; exit 1; }
ours=$(python3 - "$experiment"/runs/0/metrics.jsonl <<'PY'
import json, sys
times = sorted(json.loads(line)["step_time_ms"] for line in open(sys.argv[1])
               if json.loads(line).get("phase") == "training" and json.loads(line)["iteration"] > 2)
print(times[len(times) // 2])
PY
)
torch_json=$(/usr/bin/python3 benchmarks/torch_cpu_llama_step.py --threads "$threads" --steps "$steps" \
  --vocab_size 32000 --hidden_size 256 --num_blocks 2 --heads 8 --head_groups 2 --head_size 32 \
  --intermediate_size 512 --sequence_length 2048)
python3 - "$ours" "$torch_json" "$threads" <<'PY'
import json, sys
ours, reference, threads = float(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
theirs = reference["median_step_ms"]
print(f"threads: {threads}, tokens per step: 2048")
print(f"fast-llm          median step {ours:9.1f} ms   {2048 / ours * 1e3:9.1f} tokens/s")
print(f"{reference['framework']:<17} median step {theirs:9.1f} ms   {reference['tokens_per_second']:9.1f} tokens/s")
print(f"speed-up fast-llm / pytorch: {theirs / ours:.2f}x")
PY
