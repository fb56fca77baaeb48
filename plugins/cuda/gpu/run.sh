#!/usr/bin/env bash
# Runs the CUDA plugin's checks on a machine with a GPU, from the folder bundle.sh filled:
# the unit tests (NVRTC compiles every kernel family), the integration tests (GPU tests run,
# none skips), the C test, devplug check, the benchmark. Logs go to $OUT when it is set.
cd "$(dirname "$0")"
G=$PWD
OUT=${OUT:-$G/logs}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
# Where CUDA's libraries are: toolkit and pip wheels alike.
dirs=$(find /usr/local /usr/lib /usr/lib64 /opt -maxdepth 10 \( -name 'libnvrtc.so*' -o -name 'libcublas.so*' \) 2>/dev/null \
  | xargs -r -n1 dirname | sort -u | tr '\n' ':')
echo "CUDA library folders: $dirs"
export LD_LIBRARY_PATH="${dirs}$G:${LD_LIBRARY_PATH:-}"
export DEVPLUG_CUDA_PLUGIN=$G/libdevplug_cuda.so
echo "=== unit tests (NVRTC compiles every kernel family)"
timeout 120 ./cuda_unit --test-threads=2 2>&1 | tee "$OUT/unit.log" | tail -4
echo "=== integration tests"
timeout 300 ./cuda_test --test-threads=1 --nocapture --skip the_gpu_tests_pass_on_the_fake_driver 2>&1 | tee "$OUT/tests.log" \
  | grep -E "^test |panicked|FAILED|failures|test result|skipped|devplug check" | head -80
echo "=== C test"
timeout 60 ./cuda_c_test 2>&1 | tee "$OUT/ctest.log" | grep -E "FAIL|passed|skipped"
echo "=== devplug check"
DEVPLUG_LOG=info timeout 240 ./devplug check "$G/libdevplug_cuda.so" > "$OUT/check.log" 2>&1
echo "devplug check exit status: $?"
grep -vE "^  ok " "$OUT/check.log" | tail -30
echo "=== benchmark"
timeout 180 ./cuda_bench 2>&1 | tee "$OUT/bench.log" | tail -12
