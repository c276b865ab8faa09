#!/usr/bin/env bash
# Runs on the GPU machine (see docs/gpu.md): every test binary of a staged CUDA build (tools/stage_for_device.sh),
# then the benchmarks unless TESTS_ONLY=1. kernels_test, the longest (several minutes), runs beside the others. The
# logs are packed into $OUT/device_check_logs.tar.gz when OUT is set (the device tool brings that folder back, but
# only a limited number of files), in an EXIT trap so that a call's timeout still returns them.
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d /tmp/fast_llm_device.XXXXXX)
trap '[ -n "${OUT:-}" ] && tar -czf "$OUT/device_check_logs.tar.gz" -C "$out" .' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$out/gpu.txt"

# Runs one test binary; its status goes to $out/<name>.status.
run_test() {
  local name
  name=$(basename "$1")
  "$1" --gtest_brief=1 >"$out/$name.log" 2>&1
  echo $? >"$out/$name.status"
}
[ -x build/device/bin/kernels_test ] && run_test build/device/bin/kernels_test &
for test in build/device/bin/*_test; do
  [ -x "$test" ] && [ "$(basename "$test")" != kernels_test ] && run_test "$test"
done
wait
failed=0
passed=0
for status in "$out"/*.status; do
  name=$(basename "$status" .status)
  if [ "$(cat "$status")" = 0 ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAILED: $name"
    tail -40 "$out/$name.log"
  fi
done
echo "tests: $passed passed, $failed failed"
if [ "${TESTS_ONLY:-0}" != 1 ]; then
  for benchmark in build/device/bin/*_benchmark; do
    [ -x "$benchmark" ] || continue
    echo "== $(basename "$benchmark")"
    "$benchmark" 2>&1 | tee "$out/$(basename "$benchmark").log" | tail -25
  done
fi
[ "$failed" -eq 0 ]
