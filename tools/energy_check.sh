#!/usr/bin/env bash
# Runs on the GPU machine (see docs/gpu.md): the kernel benchmarks' --sustained mode, which times each op back to back
# at the power cap a training step runs at and reads its energy from NVML (benchmarks/sustained_energy.h): the
# attention variants on their five cases, the gemm at the Llama-3.2-1B step's largest shapes (MLP down, MLP up and gate
# fused, LM head), and the memory-bound ops at that model's shapes. About 2 minutes. Each log is written under $OUT as
# it goes (when OUT is set), so a call that runs out of time keeps what finished. Environment: SUSTAINED_S (seconds per
# op, 1), BIN_DIR (build/device/bin).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$(mktemp -d /tmp/fast_llm_energy.XXXXXX)}
bin=${BIN_DIR:-build/device/bin}
seconds=${SUSTAINED_S:-1}
status=0
run() {  # log name, command...
  local log=$out/$1.log
  shift
  echo "== $*"
  "$@" >"$log" 2>&1 || status=1
  cat "$log"
}
run attention "$bin/attention_benchmark" 20 --sustained "$seconds"
for shape in "16384 2048 8192" "16384 16384 2048" "16384 128256 2048"; do
  # shellcheck disable=SC2086
  run "gemm_${shape// /x}" "$bin/gemm_benchmark" --sustained $shape "$seconds"
done
run ops "$bin/ops_benchmark" 16384 20 --sustained "$seconds"
echo "logs: $out"
exit "$status"
