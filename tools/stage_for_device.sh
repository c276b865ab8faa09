#!/usr/bin/env bash
# Stages a CUDA build for the GPU machine: copies build/<preset>/{bin,lib} into build/device/ and adds the shared
# libraries they need that the GPU machine may lack (yaml-cpp, fmt, OpenBLAS, Gloo, the CUDA runtime...), so that
# `$ORIGIN/../lib` finds them there. cuBLAS(Lt), NCCL, cuDNN and the driver are on that machine's library path and
# are not copied (they are large); neither are glibc and libstdc++ (the GPU machine's are newer).
# Everything is stripped and packed into build/device.tar.gz too: the device tool carries at most 64 MiB, and
# OpenBLAS alone is half of that unpacked. On the GPU machine: `tar xzf build/device.tar.gz -C build`.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-cuda}
source_dir=build/$preset
target=build/device
rm -rf "$target"
mkdir -p "$target/bin" "$target/lib"
cp -a "$source_dir/bin/." "$target/bin/"
cp -a "$source_dir/lib/." "$target/lib/"
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+|libgcc_s|libcuda\.so|libcublas|libcublasLt|libnccl|libcudnn|libnvidia)'
for file in "$target"/bin/* "$target"/lib/*.so*; do
  [ -f "$file" ] || continue
  ldd "$file" 2>/dev/null | awk '/=> \//{print $1" "$3}' | while read -r name path; do
    if [[ "$name" =~ $skip ]]; then continue; fi
    [ -e "$target/lib/$name" ] || cp -L "$path" "$target/lib/$name"
  done
done
# Tests that read files relative to the source tree find them through this link-free copy.
strip --strip-unneeded "$target"/bin/* "$target"/lib/*.so* 2>/dev/null || true
tar -czf build/device.tar.gz -C build device
du -sh "$target" build/device.tar.gz
