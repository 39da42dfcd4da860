#!/usr/bin/env bash
# The unit tests under AddressSanitizer and UndefinedBehaviorSanitizer (the asan preset,
# build-asan/), then the libFuzzer targets from their seed corpora (the fuzz preset, clang,
# build-fuzz/: tests/fuzz/corpus/, 20,000 runs each). Any sanitizer report fails the run: ASan
# and UBSan stop at the first error (halt_on_error; the asan preset compiles with
# -fno-sanitize-recover=undefined), LeakSanitizer reports leaks but libnvJitLink's own
# (tests/lsan.supp). CI runs it after scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# The build runs its own tools too (the shipped units are linked by cudaq-rt-link at build time).
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
cmake --preset asan >/dev/null
cmake --build --preset asan
ctest --preset asan -L unit "$@"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz
ctest --preset fuzz
