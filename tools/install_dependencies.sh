#!/usr/bin/env bash
# Installs the Debian packages fast-llm builds against, if any is missing (needs root or sudo). g++ brings its own
# OpenMP (libgomp). openmpi-bin is only for the test that launches training with mpirun. The tokenizers use PCRE2
# (split patterns), ICU (normalization) and libsentencepiece (.model files); npm installs the references of their
# exactness test (tools/install_tokenizer_references.sh). `prepare` reads .gz and .zst inputs through zlib and
# libzstd.
# --fuzz: also clang 16 with libFuzzer, the sanitizers and LLVM's OpenMP, for the `fuzz` preset (clang 14, Debian 12's
# default, has no std::source_location). Debian's libomp-dev is clang 14's and conflicts with libomp-16-dev: it is not
# installed.
set -euo pipefail
packages=(cmake ninja-build g++ libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev libopenblas-dev
          libgloo-dev libgtest-dev libbenchmark-dev python3 ccache openmpi-bin libpcre2-dev libicu-dev
          libsentencepiece-dev pkg-config nodejs zlib1g-dev libzstd-dev)
if [ "${1:-}" = "--fuzz" ]; then
  packages+=(clang-16 libclang-rt-16-dev libomp-16-dev)
fi
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
# NodeSource's nodejs bundles npm (and conflicts with Debian's npm package): ask for npm only when there is none.
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
