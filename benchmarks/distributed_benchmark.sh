#!/usr/bin/env bash
# Data-parallel training benchmark on the GPUs of one node (issue 17; predictions in docs/distributed.md). For each
# dense shape: `fast-llm train gpt --nproc-per-node $NPROC` on examples/benchmarks/<shape>.yaml with
# `model.multi_stage.zero_stage=$ZERO_STAGE`, preceded, when NPROC > 1, by the same command on one process. Every rank
# reads its own micro-batch of the config's size, so the global batch grows with NPROC (weak scaling). Prints, from
# rank 0's log lines, the median step time, tokens/s per GPU and model TFLOP/s per GPU, and the weak-scaling
# efficiency: tokens/s per GPU on NPROC processes over tokens/s per GPU on one.
#
#   NPROC=8 ZERO_STAGE=1 bash benchmarks/distributed_benchmark.sh [smollm2-135m] [llama-3.2-1b] [llama-3.2-3b]
#
# Runs on the GPU machine with a staged CUDA build (tools/stage_for_device.sh; docs/gpu.md), as
# benchmarks/gpu_training_benchmark.sh does. Environment:
#   NPROC            processes, one per GPU (default: every GPU of CUDA_VISIBLE_DEVICES, else of nvidia-smi -L)
#   ZERO_STAGE       1, 2 or 3 (1)                          FAST_LLM_BINARY  fast-llm binary (build/device/bin/fast-llm)
#   STEPS            steps per run (15; the first 2 untimed) RUN_TIMEOUT      seconds per run (300)
#   OVERRIDES        extra `a.b=value` overrides for every run
# Logs and results.tsv go to $OUT/distributed_benchmark when OUT is set (the device tool brings it back), else to a
# temporary folder that is printed. Exit status: 0 when every run produced numbers, 1 when one failed, 2 on bad input.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
binary=${FAST_LLM_BINARY:-build/device/bin/fast-llm}
zero_stage=${ZERO_STAGE:-1}
steps=${STEPS:-15}
warmup=2
run_timeout=${RUN_TIMEOUT:-300}
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  gpus=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
else
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
fi
nproc_run=${NPROC:-$gpus}
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(smollm2-135m llama-3.2-1b llama-3.2-3b)

for shape in "${shapes[@]}"; do
  [ -f "examples/benchmarks/$shape.yaml" ] || { echo "unknown shape $shape (examples/benchmarks/*.yaml)"; exit 2; }
done
[ -x "$binary" ] || { echo "no fast-llm binary at $binary (stage a CUDA build: tools/stage_for_device.sh)"; exit 2; }
[[ "$nproc_run" =~ ^[1-9][0-9]*$ ]] || { echo "NPROC must be a positive integer, not '$nproc_run'"; exit 2; }
[ "$nproc_run" -le "$gpus" ] || { echo "NPROC=$nproc_run but $gpus GPU(s) visible"; exit 2; }
[[ "$zero_stage" =~ ^[123]$ ]] || { echo "ZERO_STAGE must be 1, 2 or 3, not '$zero_stage'"; exit 2; }
if [ -n "${OUT:-}" ]; then work=$OUT/distributed_benchmark; else work=$(mktemp -d /tmp/distributed_benchmark.XXXXXX); fi
mkdir -p "$work"
{ nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1 || true; } \
  | tee "$work/gpu.txt"
"$binary" --version 2>&1 | tee "$work/fast_llm_version.txt"
# The CPU's threads shared among the processes; the one-process baseline gets the same share.
threads=$(($(nproc) / nproc_run))
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$((threads > 0 ? threads : 1))}

# Rank 0's log lines of $1 after the warm-up steps, as "step_ms tokens_per_s_per_gpu tflops_per_gpu" rows.
timed_rows() {
  awk -v warmup="$warmup" '/training @ iteration/ {
    n = split($0, part, / \| /); iteration = ""; step = ""; tflops = ""; tokens = ""
    for (i = 1; i <= n; i++) {
      field = part[i]
      if (field ~ /@ iteration/) { sub(/.*@ iteration */, "", field); sub(/\/.*/, "", field); iteration = field + 0 }
      else if (field ~ /^step time: /) { gsub(/[^0-9.]/, "", field); step = field }
      else if (field ~ /tflop\/s \(model\)/) { gsub(/[^0-9.]/, "", field); tflops = field }
      else if (field ~ /tokens\/s\/gpu/) { gsub(/[^0-9.]/, "", field); tokens = field }
    }
    if (iteration > warmup && step != "" && tokens != "" && tflops != "") print step, tokens, tflops
  }' "$1"
}

# Median of column $2 of the rows in file $1.
median() {
  sort -g -k"$2,$2" "$1" | awk -v column="$2" '{ value[NR] = $column }
    END { if (NR == 0) exit 1; printf "%.2f", NR % 2 ? value[(NR + 1) / 2] : (value[NR / 2] + value[NR / 2 + 1]) / 2 }'
}

# One run of $1 (shape) on $2 processes; sets `result` to "step_ms tokens_per_s_per_gpu tflops_per_gpu" or "".
run() {
  local shape=$1 processes=$2 name="$1/nproc$2" rc
  rm -rf "${work:?}/$name"
  mkdir -p "$work/$name"
  echo "== $shape: $processes process(es), zero_stage $zero_stage, $steps steps (timeout ${run_timeout}s)"
  # shellcheck disable=SC2086  # OVERRIDES is a list of words
  timeout -k 20 "$run_timeout" "$binary" train gpt --nproc-per-node "$processes" \
    -c "examples/benchmarks/$shape.yaml" model.multi_stage.zero_stage="$zero_stage" training.train_iters="$steps" \
    training.logs.interval=1 run.experiment_dir="$work/$name/experiment" ${OVERRIDES:-} >"$work/$name/log.txt" 2>&1
  rc=$?
  echo "$rc" >"$work/$name/rc"
  timed_rows "$work/$name/log.txt" >"$work/$name/timed.txt"
  result=""
  if [ "$rc" -ne 0 ] || [ ! -s "$work/$name/timed.txt" ]; then
    echo "failed (exit $rc$([ "$rc" -eq 124 ] && echo ', timed out'), $(wc -l <"$work/$name/timed.txt") timed steps):"
    tail -15 "$work/$name/log.txt"
    return 1
  fi
  result="$(median "$work/$name/timed.txt" 1) $(median "$work/$name/timed.txt" 2) $(median "$work/$name/timed.txt" 3)"
}

status=0
printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' shape processes zero_stage step_ms tokens_per_s_per_gpu tflops_per_gpu \
  efficiency >"$work/results.tsv"
for shape in "${shapes[@]}"; do
  baseline=""
  if [ "$nproc_run" -gt 1 ]; then
    if run "$shape" 1; then baseline=$result; else status=1; fi
    [ -z "$baseline" ] || printf '%s\t1\t%s\t%s\t-\n' "$shape" "$zero_stage" "${baseline// /$'\t'}" >>"$work/results.tsv"
  fi
  if run "$shape" "$nproc_run"; then
    efficiency=-
    if [ -n "$baseline" ]; then
      efficiency=$(awk -v n="${result#* }" -v one="${baseline#* }" 'BEGIN { split(n, a, " "); split(one, b, " ");
        printf "%.1f%%", 100 * a[1] / b[1] }')
    fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$shape" "$nproc_run" "$zero_stage" "${result// /$'\t'}" "$efficiency" \
      >>"$work/results.tsv"
  else
    status=1
  fi
done

echo "== tokens/s and TFLOP/s per GPU: medians of steps $((warmup + 1))-$steps of rank 0's log; efficiency: tokens/s" \
  "per GPU against the one-process run"
awk -F '\t' '{ printf "%-14s %9s %10s %9s %20s %14s %10s\n", $1, $2, $3, $4, $5, $6, $7 }' "$work/results.tsv"
echo "logs: $work"
exit "$status"
