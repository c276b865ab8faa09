#!/usr/bin/env bash
# Runs on the one-GPU machine (docs/gpu.md, with a staged CUDA build): the multi-process checks of issue 17 that need
# a GPU. (1) The data-parallel layouts as 2 and 4 processes sharing the GPU through the Gloo engine's host staging,
# against the one-process GPU run (data_parallel_training_test with FAST_LLM_TEST_CUDA=1); (2) a 2-process run
# started by torchrun (`torchrun --nproc_per_node=2 --no_python fast-llm train gpt ...`), when torchrun is there.
# Exit status: 0 when both passed.
set -uo pipefail
cd "$(dirname "$0")/.."
binary=build/device/bin/fast-llm
work=$(mktemp -d /tmp/fast_llm_distributed.XXXXXX)
status=0

echo "== data-parallel layouts on one GPU (Gloo staging, bf16)"
FAST_LLM_TEST_CUDA=1 build/device/bin/data_parallel_training_test --gtest_brief=1 || status=1

echo "== torchrun --nproc_per_node=2 --no_python fast-llm train gpt"
if command -v torchrun >/dev/null 2>&1; then
  cat >"$work/config.yaml" <<'EOF'
training: {train_iters: 20, logs: {interval: 5}, checkpoint: {interval: 20}}
data:
  datasets: {training: {type: random}}
  micro_batch_size: 2048
optimizer: {learning_rate: {base: 1.0e-3}}
model:
  base_model:
    embeddings: {vocab_size: 32000}
    decoder:
      block:
        mixer: {type: attention, heads: 8, head_groups: 2, head_size: 64, add_linear_biases: false}
        mlp: {intermediate_size: 1536, gated: true, activation: silu, add_linear_biases: false}
        normalization: {type: rms_norm}
      num_blocks: 4
    hidden_size: 512
  multi_stage: {zero_stage: 3, layers_per_stage: 1}
  distributed: {compute_dtype: bf16, backend: gloo}
EOF
  if torchrun --nproc_per_node=2 --no_python "$binary" train gpt -c "$work/config.yaml" \
      run.experiment_dir="$work/experiment" >"$work/torchrun.log" 2>&1 &&
     [ -f "$work/experiment/checkpoint/20/ok" ] && [ -f "$work/experiment/checkpoint/20/rank_1.safetensors" ]; then
    grep -E "processes joined|ZeRO|training @ iteration +20" "$work/torchrun.log" | cut -c1-400
    echo "torchrun: passed"
  else
    tail -30 "$work/torchrun.log"
    echo "torchrun: FAILED"
    status=1
  fi
else
  echo "torchrun: not on this machine, skipped"
fi
exit $status
