#!/usr/bin/env bash
# The whole test suite: installs missing Debian packages, builds the CPU backend and runs every CPU test with ctest;
# when nvcc is present, also compiles the CUDA backend (its tests need a GPU: see docs/gpu.md).
# Set FAST_LLM_SANITIZE_TESTS=1 to also build and run the suite under AddressSanitizer + UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_dependencies.sh
jobs=$(nproc)

cmake --preset cpu >/dev/null
cmake --build --preset cpu -j "$jobs"

if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null 2>&1; then
  echo "== compiling the CUDA backend (tests run on a GPU machine)"
  cmake --preset cuda >/dev/null
  cmake --build --preset cuda -j "$jobs"
fi

if [ "${FAST_LLM_SANITIZE_TESTS:-0}" = "1" ]; then
  echo "== address/undefined-behaviour sanitizer build"
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs"
  ctest --preset asan -L cpu -j "$jobs"
fi

ctest --preset cpu -L cpu -j "$jobs"
