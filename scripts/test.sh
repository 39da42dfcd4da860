#!/usr/bin/env bash
# Builds with the default preset and runs every test but benchmarks and fuzzers. Tests that need
# a GPU (label gpu) report SKIPPED where there is none.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset default >/dev/null
cmake --build --preset default
ctest --preset default "$@"
