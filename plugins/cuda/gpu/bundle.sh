#!/usr/bin/env bash
# Builds what the GPU checks run into .gpu/ at the workspace root (ignored by git), on this
# machine, for a machine that has a GPU but no Rust toolchain: the CUDA plugin, its integration
# tests, its unit tests (NVRTC compiles every kernel family), its benchmark, the devplug tool
# (devplug check) and the C test, all optimized and stripped, with run.sh beside them.
#
#   plugins/cuda/gpu/bundle.sh          # then, on the GPU machine: .gpu/run.sh
#
# run.sh finds CUDA's libraries (toolkit or pip wheels), runs everything with timeouts and
# copies the logs to $OUT when it is set.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$root"
out="$root/.gpu"
mkdir -p "$out"

exe_of() { # the executable cargo reports for a test/bench target
  grep -o "\"executable\":\"[^\"]*\"" | sed 's/"executable":"//; s/"$//' | grep "/$1-" | head -n 1
}
msgs=$(cargo test -p devplug-plugin-cuda --release --no-run --message-format=json 2>/dev/null)
cp "$(echo "$msgs" | exe_of cuda)" "$out/cuda_test"
cp "$(echo "$msgs" | exe_of devplug_cuda)" "$out/cuda_unit"
msgs=$(cargo bench -p devplug-plugin-cuda --no-run --message-format=json 2>/dev/null)
cp "$(echo "$msgs" | exe_of cuda)" "$out/cuda_bench"
cargo build -q -p devplug-capi --release
cp target/release/deps/libdevplug_cuda.so target/release/devplug "$out/"
cp target/release/libdevplug.so "$out/libdevplug.so.0"
cc -std=c11 -O1 -Wall -Wextra -Icapi/include -Itests/c -DDEVPLUG_TEST_PLUGIN_DIR='"."' \
  tests/c/cuda_test.c -L"$out" -l:libdevplug.so.0 -lm -Wl,-rpath,'$ORIGIN' -o "$out/cuda_c_test"
strip "$out"/cuda_test "$out"/cuda_unit "$out"/cuda_bench "$out"/devplug "$out"/cuda_c_test \
  "$out"/libdevplug_cuda.so "$out"/libdevplug.so.0
cp plugins/cuda/gpu/run.sh "$out/run.sh"
du -sh "$out"
