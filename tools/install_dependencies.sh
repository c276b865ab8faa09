#!/usr/bin/env bash
# Installs the Debian packages fast-llm builds against, if any is missing (needs root or sudo).
set -euo pipefail
packages=(cmake ninja-build g++ libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev libopenblas-dev
          libgloo-dev libgtest-dev libbenchmark-dev libomp-dev python3 ccache)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
