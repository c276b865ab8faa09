#!/usr/bin/env bash
# Runs on the GPU machine (see docs/gpu.md): every test binary of a staged CUDA build (tools/stage_for_device.sh),
# then the benchmarks. The logs are packed into $OUT/device_check_logs.tar.gz when OUT is set (the device tool brings
# that folder back, but only a limited number of files).
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d /tmp/fast_llm_device.XXXXXX)
trap '[ -n "${OUT:-}" ] && tar -czf "$OUT/device_check_logs.tar.gz" -C "$out" .' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$out/gpu.txt"
failed=0
passed=0
for test in build/device/bin/*_test; do
  [ -x "$test" ] || continue
  name=$(basename "$test")
  if "$test" --gtest_brief=1 >"$out/$name.log" 2>&1; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAILED: $name"
    tail -40 "$out/$name.log"
  fi
done
for benchmark in build/device/bin/*_benchmark; do
  [ -x "$benchmark" ] || continue
  echo "== $(basename "$benchmark")"
  "$benchmark" 2>&1 | tee "$out/$(basename "$benchmark").log" | tail -25
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
