#!/usr/bin/env bash
# Runs BUILD_DIR/bench/loopback_rtt (bench/rtt/loopback_rtt.cpp) on this machine's GPU through the
# runtime's load path: packs the example handlers with the bench's dispatch kernels, then prints
# one table (bench/loopback_rtt.md).
#
#   loopback_rtt.sh BUILD_DIR [--requests N]
#
# BUILD_DIR: a build tree (or a bundle with the same layout: bin/, lib/cudaq-rt/bridges/,
# examples/cudaq_rt_example_app, bench/) where `cmake --build BUILD_DIR --target bench_loopback_rtt_build`
# ran. Link results go to a fresh cache in a temporary directory.
set -euo pipefail
build=${1:?build directory}; shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CUDAQ_RT_BRIDGE_PATH="$build/lib/cudaq-rt/bridges" CUDAQ_RT_CACHE_DIR="$tmp/cache"
"$build/bin/cudaq-rt-pack" "$build/examples/cudaq_rt_example_app" \
  --dispatcher "$build/bench/libcudaq_rt_bench_kernels.a" --name rtt -o "$tmp" >/dev/null
# The warp kernel with stamps, a package of its own (bench/rtt/warp_rounds.cu says why).
"$build/bin/cudaq-rt-pack" "$build/examples/cudaq_rt_example_app" \
  --dispatcher "$build/bench/libcudaq_rt_bench_warp_kernels.a" --name rtt_warp -o "$tmp" >/dev/null
"$build/bench/loopback_rtt" --package "$tmp/rtt.cudaqpkg" --warp-package "$tmp/rtt_warp.cudaqpkg" "$@"
