#!/usr/bin/env bash
# ThreadSanitizer over the Rust core (RELIABILITY.md: "a stress test, run under a thread
# sanitizer where available"), with SIM and the one zoo variant these tests load instrumented
# too, so that SIM's own synchronization (its rings and spinlock) is visible to the sanitizer.
#
# Needs a nightly toolchain with rust-src (`rustup component add rust-src --toolchain nightly`:
# the standard library is rebuilt with the sanitizer) and gcc. Not part of CI: it rebuilds the
# standard library and every dependency (about 5 minutes on 2 cores, 12 GB in target/tsan). Any
# report fails it.
#
#   tests/tsan.sh
#
# The C plugins are compiled with -fsanitize=thread but linked without the sanitizer's runtime:
# the test executables carry Rust's (linked statically) and export it to the plugins they load
# (--export-dynamic). Linked with gcc's libtsan.so they would bring a second runtime, which
# cannot load into a process that already has one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

out="$PWD/target/tsan-plugins"
mkdir -p "$out/plugins/zoo"
: > "$out/CMakeCache.txt" # what the tests check for a build tree
cc_tsan() { gcc -std=c11 -fPIC -fsanitize=thread -O1 -g -pthread -Icapi/include "$@"; }
cc_tsan -fvisibility=hidden -c plugins/sim/sim.c -o "$out/sim.o"
gcc -shared -pthread "$out/sim.o" -o "$out/plugins/libdevplug_sim.so"
cc_tsan -fvisibility=hidden '-DZOO_PLUGIN_NAME="zoo_kernel_all_dtypes"' -DZOO_KERNEL_ZEROS \
  -DZOO_KERNEL_ALL_DTYPES -c plugins/zoo/zoo.c -o "$out/zoo_kernel_all_dtypes.o"
gcc -shared -pthread "$out/zoo_kernel_all_dtypes.o" \
  -o "$out/plugins/zoo/libzoo_kernel_all_dtypes.so"

export RUSTFLAGS="-Zsanitizer=thread -Clink-arg=-Wl,--export-dynamic"
export CARGO_TARGET_DIR="$PWD/target/tsan"
export DEVPLUG_TESTS_BUILD_DIR="$out"
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 ${TSAN_OPTIONS:-}"
nightly=(cargo +nightly test -Zbuild-std --target x86_64-unknown-linux-gnu)

"${nightly[@]}" -p devplug-core --lib
# The many-thread tests of the core with SIM: dispatch, graphs, traces, scopes, the log, the
# buffer pool and memory limits changed while other threads allocate. `launched_work_runs_without_a_synchronize` is left out: it watches a kernel's
# output through copies that by design do not wait for the stream (a race it means to have).
"${nightly[@]}" -p devplug-tests --test graph --test trace --test scope --test logging \
  --test buffer_pool --test memory_limit
"${nightly[@]}" -p devplug-tests --test sim -- --skip launched_work_runs_without_a_synchronize
# Kernel states (ABI 1.5) with SIM: made on the launching thread, destroyed by host callbacks on
# SIM's worker. (The RSIM test of the same file needs the Rust example plugin, not built here.)
"${nightly[@]}" -p devplug-tests --test kernel_state -- kernel_states_are_made_once
# The Rust plugin SDK's worker streams (queues, events, waits across streams, host callbacks).
"${nightly[@]}" -p devplug-plugin-sdk --lib worker
echo "tests/tsan.sh: no ThreadSanitizer report"
