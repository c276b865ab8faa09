#!/usr/bin/env bash
# GPU training benchmark (issue #5, DESIGN.md §8): for each dense shape, fast-llm's `train gpt` against transformers'
# LlamaForCausalLM (eager and torch.compile) on the same model, batch and H200, then a table of step time, tokens/s,
# model TFLOP/s (one formula for both: benchmarks/llama_shapes.py), peak memory, our/PyTorch ratios and the §8 targets.
# The mixture-of-experts shapes of issue 20 (mixtral-tiny, fine-grained) run against MixtralForCausalLM the same way
# (tools/moe_device_check.sh runs them). Issue 23's post-training shapes run the same way: llama-3.2-1b-lora (LoRA
# rank 8 on query and value, against a hand-written LoRA in PyTorch) and llama-3.2-1b-dpo (DPO, policy + frozen
# reference forward, against TRL's sigmoid loss in PyTorch; the preference data file is written first, by
# benchmarks/dpo_benchmark_data.py, and fast-llm reads it through a data-path override).
# What PyTorch runs for a shape comes from one place, its entry in benchmarks/llama_shapes.py (`lora`, `dpo`): the
# PyTorch script reads it from --shape, and `llama_shapes.py --kind SHAPE` tells this script which shapes need data.
#
#   bash benchmarks/gpu_training_benchmark.sh [smollm2-135m] [llama-3.2-1b] [llama-3.2-3b]   (default: all three)
#   bash benchmarks/gpu_training_benchmark.sh mixtral-tiny fine-grained
#   BUDGET_S=500 TORCH_STEPS=6 bash benchmarks/gpu_training_benchmark.sh llama-3.2-1b-lora llama-3.2-1b-dpo
#
# Runs on the GPU machine with a staged CUDA build (tools/stage_for_device.sh; docs/gpu.md). Environment:
#   FAST_LLM_BINARY  fast-llm binary (build/device/bin/fast-llm)       PYTHON       python3 with torch + transformers
#   OURS_STEPS       fast-llm steps per shape (15; first 2 untimed)    TORCH_STEPS  timed PyTorch steps per mode (10)
#   TORCH_WARMUP     untimed PyTorch steps per mode, compile incl. (2) TORCH_MODES  eager,compile (or compile_layers)
#   OURS_TIMEOUT     seconds per fast-llm run (150)                    TORCH_TIMEOUT seconds per PyTorch process (200)
#   OURS_OVERRIDES   extra `a.b=value` overrides for every fast-llm run (e.g. kernels.exclude=[...])
#   TORCH_ARGS       extra arguments of every PyTorch run (e.g. --experts-implementation grouped_mm, or
#                    --logits-to-keep for the DPO shape: TRL's use_logits_to_keep)
#   OURS_PROFILE     1: after each timed fast-llm run, a short profiled run prints the time per kernel variant
#   BUDGET_S         wall-clock budget of the whole script (450): each run's timeout is cut to a fair share of what
#                    is left, so one hang or one slow compile cannot take the device call or the other shapes with
#                    it; runs that no longer fit are reported as skipped. fast-llm runs first on every shape.
# Logs, metrics and benchmark.json go to $OUT/gpu_benchmark when OUT is set (the device tool brings it back), else to
# a temporary folder that is printed. Exit status: 0 when every run produced numbers (targets missed or not), 1 when
# a run failed or timed out.
set -uo pipefail
cd "$(dirname "$0")/.."
binary=${FAST_LLM_BINARY:-build/device/bin/fast-llm}
python=${PYTHON:-python3}
ours_steps=${OURS_STEPS:-15}
torch_steps=${TORCH_STEPS:-10}
torch_warmup=${TORCH_WARMUP:-2}
torch_modes=${TORCH_MODES:-eager,compile}
ours_timeout=${OURS_TIMEOUT:-150}
torch_timeout=${TORCH_TIMEOUT:-200}
budget=${BUDGET_S:-450}
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(smollm2-135m llama-3.2-1b llama-3.2-3b)
if [ -n "${OUT:-}" ]; then work=$OUT/gpu_benchmark; else work=$(mktemp -d /tmp/gpu_benchmark.XXXXXX); fi
mkdir -p "$work"
start=$SECONDS

for shape in "${shapes[@]}"; do
  [ -f "examples/benchmarks/$shape.yaml" ] || { echo "unknown shape $shape (examples/benchmarks/*.yaml)"; exit 2; }
done
[ -x "$binary" ] || { echo "no fast-llm binary at $binary (stage a CUDA build: tools/stage_for_device.sh)"; exit 2; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 || true; } \
  | tee "$work/gpu.txt"
"$binary" --version 2>&1 | tee "$work/fast_llm_version.txt"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}

# timeout for the next run: its own limit ($1), cut to a fair share of the budget left among the $2 runs still to
# come (this one included); 0: skip it.
limit() {
  local left=$((budget - (SECONDS - start)))
  local share=$((left / ${2:-1}))
  if [ "$share" -lt 20 ]; then echo 0; elif [ "$share" -lt "$1" ]; then echo "$share"; else echo "$1"; fi
}

# The GPU's SM clock and power while a run goes, sampled every 200 ms into $1 (the report gives their busy-phase median:
# a training step holds the H200 at its 700 W cap, where the clock of compute-bound kernels follows power). The GPU is
# the first of CUDA_VISIBLE_DEVICES, or 0; the sampler of an interrupted run is stopped on exit.
gpu_index=${CUDA_VISIBLE_DEVICES:-0}
gpu_index=${gpu_index%%,*}
sampler=""
trap '[ -n "$sampler" ] && kill "$sampler" 2>/dev/null' EXIT
sample_gpu() {
  nvidia-smi -i "$gpu_index" --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 200 >"$1" \
    2>/dev/null &
  echo $!
}

# First fast-llm on every shape (short and predictable), then PyTorch (compilation dominates), so a slow compile
# cannot cost our numbers; each PyTorch process gets at least a fair share of what is left.
status=0
count=${#shapes[@]}
index=0
for shape in "${shapes[@]}"; do
  experiment=$work/$shape/fast_llm
  rm -rf "$experiment"
  mkdir -p "$work/$shape"
  # A DPO shape trains on preference documents written here (PyTorch makes the same ones again).
  shape_overrides=()
  if [ "$("$python" benchmarks/llama_shapes.py --kind "$shape")" = dpo ]; then
    data=$work/$shape/preferences.fast_llm_dataset
    if ! "$python" benchmarks/dpo_benchmark_data.py --shape "$shape" --steps "$ours_steps" --output "$data" \
      >"$work/$shape/data.log" 2>&1; then
      echo "== $shape: the preference data could not be written:"
      tail -5 "$work/$shape/data.log"
    fi
    shape_overrides=("data.datasets.training.path=$data")
  fi
  # Shares among the fast-llm runs left and the PyTorch processes to come.
  seconds=$(limit "$ours_timeout" $((count - index + count)))
  index=$((index + 1))
  if [ "$seconds" -gt 0 ]; then
    echo "== $shape: fast-llm, $ours_steps steps (timeout ${seconds}s, $((SECONDS - start))s elapsed)"
    sampler=$(sample_gpu "$work/$shape/fast_llm_gpu.csv")
    timeout -k 10 "$seconds" "$binary" train gpt -c "examples/benchmarks/$shape.yaml" \
      training.train_iters="$ours_steps" training.logs.interval=1 run.experiment_dir="$experiment" \
      ${shape_overrides[@]+"${shape_overrides[@]}"} ${OURS_OVERRIDES:-} >"$work/$shape/fast_llm.log" 2>&1
    rc=$?
    kill "$sampler" 2>/dev/null
    sampler=""
    echo "$rc" >"$work/$shape/fast_llm.rc"
    if [ "$rc" -ne 0 ]; then
      status=1
      echo "fast-llm failed (exit $rc$([ "$rc" -eq 124 ] && echo ', timed out')):"
      tail -15 "$work/$shape/fast_llm.log"
    elif [ "${OURS_PROFILE:-0}" = "1" ]; then
      # Where the time goes: a separate short run timing every kernel (steps 4-5), so the timed run stays clean.
      timeout -k 10 "$seconds" "$binary" train gpt -c "examples/benchmarks/$shape.yaml" training.train_iters=5 \
        training.logs.interval=5 profiling.cuda=true profiling.averages=true profiling.skip=3 profiling.warmup=0 \
        profiling.cycles=2 run.experiment_dir="$experiment-profile" ${shape_overrides[@]+"${shape_overrides[@]}"} ${OURS_OVERRIDES:-} \
        >"$work/$shape/fast_llm_profile.log" 2>&1
      table=$(ls "$experiment-profile"/runs/0/profile/step_*.txt 2>/dev/null | head -1)
      if [ -n "$table" ]; then head -30 "$table"; else tail -5 "$work/$shape/fast_llm_profile.log"; fi
    fi
  else
    echo "skipped" >"$work/$shape/fast_llm.rc"
    echo "== $shape: fast-llm skipped (budget of ${budget}s spent)"
    status=1
  fi
done
index=0
for shape in "${shapes[@]}"; do
  seconds=$(limit "$torch_timeout" $((count - index)))
  index=$((index + 1))
  if [ "$seconds" -gt 0 ]; then
    echo "== $shape: PyTorch $torch_modes, $torch_warmup + $torch_steps steps each (timeout ${seconds}s," \
      "$((SECONDS - start))s elapsed)"
    sampler=$(sample_gpu "$work/$shape/torch_gpu.csv")
    timeout -k 10 "$seconds" "$python" benchmarks/torch_gpu_llama_step.py --shape "$shape" --modes "$torch_modes" \
      --steps "$torch_steps" --warmup "$torch_warmup" ${TORCH_ARGS:-} >"$work/$shape/torch.jsonl" \
      2>"$work/$shape/torch.err"
    rc=$?
    kill "$sampler" 2>/dev/null
    sampler=""
    echo "$rc" >"$work/$shape/torch.rc"
    if [ "$rc" -ne 0 ]; then
      status=1
      echo "PyTorch exited with $rc$([ "$rc" -eq 124 ] && echo ' (timed out)'); what it printed is kept:"
      tail -8 "$work/$shape/torch.err"
    fi
    grep -q '"ok": false' "$work/$shape/torch.jsonl" && status=1
  else
    echo "skipped" >"$work/$shape/torch.rc"
    echo "== $shape: PyTorch skipped (budget of ${budget}s spent)"
    status=1
  fi
done

echo "== total $((SECONDS - start))s"
"$python" benchmarks/gpu_benchmark_report.py --work "$work" --ours-warmup 2 "${shapes[@]}" || status=1
echo "logs: $work"
exit "$status"
