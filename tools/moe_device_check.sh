#!/usr/bin/env bash
# The mixture-of-experts check for one GPU call (issue 20), run from the repository root on the GPU machine after
#   tar xzf build/device.tar.gz -C build && export LD_LIBRARY_PATH=$PWD/build/device/lib
# (a staged CUDA build: tools/stage_for_device.sh). In order, each part on its own, so that a failing or slow part
# never stops the next:
#   1. kernels_moe_cuda_test: the CUDA MoE ops against their CPU references (tests/kernels/moe_consistency_test.cpp),
#      then moe_ops_benchmark: each op's device time at both shapes, and the expert gemm loop (about 10 s);
#   2. the CUDA cases of the MoE layers, where a test binary has some (gtest names with Cuda and Moe / MoE / Mixtral /
#      Expert);
#   3. the training benchmark at the two MoE shapes (mixtral-tiny, fine-grained: examples/benchmarks/) beside
#      transformers' MixtralForCausalLM, eager and torch.compile (benchmarks/gpu_training_benchmark.sh): 2 warm-up +
#      5 timed steps each, within what is left of the budget, so a slow torch.compile is cut (its eager line stays).
# Everything goes under $OUT/moe_device_check (or a printed temporary folder): summary.txt (the verdict of every part),
# the test logs, benchmark.txt / benchmark.json (the table: tokens/s, model TFLOP/s, peak memory, ratios, targets) and
# logs.tar.gz (the benchmark's logs and metrics). Environment:
#   MOE_BUDGET_S      wall-clock budget of the whole script (200)       MOE_TEST_TIMEOUT  seconds for part 1 (90)
#   MOE_LAYER_TIMEOUT seconds per binary of part 2 (60)                 MOE_SHAPES        shapes of part 3
#   MOE_PROFILE       1: a short profiled fast-llm run per shape prints the time per kernel (costs budget)
#   TORCH_ARGS        extra arguments of the PyTorch runs (e.g. --experts-implementation grouped_mm: transformers 5's
#                     experts backends; by default transformers chooses, and the setup line of torch.jsonl says which)
# Exit status 0 when every part that ran passed and produced its numbers, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
budget=${MOE_BUDGET_S:-200}
bin=build/device/bin
[ -d build/device/lib ] && export LD_LIBRARY_PATH=$PWD/build/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ -n "${OUT:-}" ]; then report=$OUT/moe_device_check; else report=$(mktemp -d /tmp/moe_device_check.XXXXXX); fi
mkdir -p "$report"
work=$(mktemp -d /tmp/moe_device_work.XXXXXX)  # the benchmark's experiments; only logs and metrics come back
status=0

# The benchmark's small files (logs, metrics, configs, JSON lines, GPU samples) into one archive, on any exit.
pack() {
  (cd "$work" && find . -type f -size -8M \( -name '*.log' -o -name '*.jsonl' -o -name '*.json' -o -name '*.txt' \
    -o -name '*.csv' -o -name '*.rc' -o -name '*.err' -o -name '*.yaml' \) -print0 |
    tar -czf "$report/logs.tar.gz" --null -T - 2>/dev/null)
}
trap pack EXIT
say() { echo "$*" | tee -a "$report/summary.txt"; }
elapsed() { echo $((SECONDS - start)); }

{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 || true; } \
  | tee "$report/gpu.txt"
say "moe_device_check $(date -u +%FT%TZ) on $(head -1 "$report/gpu.txt"); budget ${budget}s"

# Part 1: the kernels.
if [ -x "$bin/kernels_moe_cuda_test" ]; then
  timeout -k 5 "${MOE_TEST_TIMEOUT:-90}" "$bin/kernels_moe_cuda_test" --gtest_brief=1 \
    >"$report/kernels_moe_cuda_test.log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || status=1
  say "== kernels_moe_cuda_test: exit $rc$([ "$rc" -eq 124 ] && echo ' (timed out)') ($(elapsed)s elapsed)"
  grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\]|Failure|declines|relative error|differs' \
    "$report/kernels_moe_cuda_test.log" | head -40 | tee -a "$report/summary.txt"
else
  status=1
  say "== kernels_moe_cuda_test: missing from $bin (stage a CUDA build with tools/stage_for_device.sh)"
fi

# Part 1b: the ops' device times at both shapes (checked against the CPU references first).
if [ -x "$bin/moe_ops_benchmark" ]; then
  timeout -k 5 60 "$bin/moe_ops_benchmark" >"$report/moe_ops_benchmark.log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || status=1
  say "== moe_ops_benchmark: exit $rc ($(elapsed)s elapsed)"
  tee -a "$report/summary.txt" <"$report/moe_ops_benchmark.log"
else
  say "== moe_ops_benchmark: missing from $bin"
fi

# Part 2: the MoE layers' CUDA cases, in whichever test binary has them.
filter='*Cuda*Moe*:*Moe*Cuda*:*Cuda*MoE*:*MoE*Cuda*:*Cuda*Mixtral*:*Mixtral*Cuda*:*Cuda*Expert*:*Expert*Cuda*'
found=0
for test in "$bin"/*_test; do
  [ -x "$test" ] || continue
  name=$(basename "$test")
  [ "$name" = kernels_moe_cuda_test ] && continue
  cases=$(timeout -k 5 20 "$test" --gtest_list_tests --gtest_filter="$filter" 2>/dev/null | grep -c '^  ')
  [ "${cases:-0}" -gt 0 ] || continue
  found=1
  timeout -k 5 "${MOE_LAYER_TIMEOUT:-60}" "$test" --gtest_filter="$filter" --gtest_brief=1 \
    >"$report/$name.moe.log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || status=1
  say "== $name ($cases MoE CUDA cases): exit $rc$([ "$rc" -eq 124 ] && echo ' (timed out)') ($(elapsed)s elapsed)"
  grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\]|Failure' "$report/$name.moe.log" | head -20 | tee -a "$report/summary.txt"
done
[ "$found" -eq 1 ] || say "== no CUDA MoE layer test in $bin (no gtest name matches $filter)"

# Part 3: the training benchmark, in what is left of the budget (10 s kept for the report and the archive).
read -r -a shapes <<<"${MOE_SHAPES:-mixtral-tiny fine-grained}"
left=$((budget - $(elapsed) - 10))
if [ "$left" -lt 60 ]; then
  status=1
  say "== benchmark skipped: ${left}s left of the budget"
else
  say "== benchmark ${shapes[*]}: budget ${left}s ($(elapsed)s elapsed)"
  BUDGET_S=$left OURS_STEPS=7 TORCH_STEPS=5 TORCH_WARMUP=2 TORCH_MODES=eager,compile OURS_TIMEOUT=90 \
    TORCH_TIMEOUT=150 OURS_PROFILE=${MOE_PROFILE:-0} OUT=$work \
    bash benchmarks/gpu_training_benchmark.sh "${shapes[@]}" >"$report/benchmark.log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || status=1
  for file in benchmark.txt benchmark.json; do
    [ -f "$work/gpu_benchmark/$file" ] && cp "$work/gpu_benchmark/$file" "$report/$file"
  done
  say "benchmark: exit $rc ($(elapsed)s elapsed)"
  if [ -f "$report/benchmark.txt" ]; then
    tee -a "$report/summary.txt" <"$report/benchmark.txt"
  else
    tail -30 "$report/benchmark.log" | tee -a "$report/summary.txt"
  fi
  # Why a run failed, from its own log.
  for shape in "${shapes[@]}"; do
    for log in fast_llm.log torch.err; do
      file=$work/gpu_benchmark/$shape/$log
      rc_file=$work/gpu_benchmark/$shape/${log%%.*}.rc
      [ "$log" = torch.err ] && rc_file=$work/gpu_benchmark/$shape/torch.rc
      if [ -f "$file" ] && [ "$(cat "$rc_file" 2>/dev/null)" != 0 ]; then
        say "-- $shape $log (exit $(cat "$rc_file" 2>/dev/null)), last lines:"
        tail -12 "$file" | tee -a "$report/summary.txt"
      fi
    done
  done
fi
say "== done in $(elapsed)s, status $status; results in $report"
exit "$status"
