#!/usr/bin/env bash
# Copies what the GPU tests and benchmarks need from a build tree into a bundle (stripped of debug
# info) that can travel to a GPU machine which has no LLVM or toolchain of ours:
#   gpu-bundle.sh BUILD_DIR OUT_DIR [BRIDGES]
# BRIDGES: the bridges to take, comma-separated names (loopback,udp,loopback_stamps); default
# every one the build tree has. A tree where the bench's bridge variants were built holds a dozen
# of them, and with bench/loopback_rtt the bundle then passes 64 MiB.
# Layout: bin/, lib/libcudaq_rt.so.0, lib/cudaq-rt/bridges/, lib/cudaq-rt/python/cudaq_rt/, lib/libcudaq_rt_nvjitlink_cu13.so and
# _cu12.so (and the cu13 one as lib/libcudaq_rt_nvjitlink.so),
# examples/, tests/gpu/, bench/
# and bench/jit_start/ (as in the build tree), so that bench/loopback_rtt.sh, bench/bridge_ab.sh,
# bench/jit_start/jit_start.sh and scripts/gpu-tests.sh take the bundle for a build directory.
set -euo pipefail
build=${1:?build directory} out=${2:?output directory} bridges=${3:-}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/cudaq-rt/bridges" "$out/examples" "$out/tests/gpu" "$out/tests/capi" \
  "$out/bench"
copy() { # SRC DST: stripped when it is an ELF file, skipped when it was not built
  [ -e "$1" ] || return 0
  if head -c 4 "$1" | grep -q ELF; then strip --strip-debug -o "$2" "$1"; else cp "$1" "$2"; fi
}
for f in "$build"/bin/*; do copy "$f" "$out/bin/${f##*/}"; done
for f in "$build"/lib/cudaq-rt/bridges/*.so; do
  name=${f##*/libcudaq_rt_bridge_}
  name=${name%.so}
  [ -z "$bridges" ] || [[ ",$bridges," == *",$name,"* ]] || continue
  copy "$f" "$out/lib/cudaq-rt/bridges/${f##*/}"
done
# The dispatchers' units the build ships (a link cache directory beside the bridges).
[ -d "$build/lib/cudaq-rt/units" ] && cp -r "$build/lib/cudaq-rt/units" "$out/lib/cudaq-rt/units"
# cudaq_rt._fastcall, where the build made it (the Python package looks beside the runtime).
if [ -f "$build/lib/cudaq-rt/python/cudaq_rt/_fastcall.abi3.so" ]; then
  mkdir -p "$out/lib/cudaq-rt/python/cudaq_rt"
  copy "$build/lib/cudaq-rt/python/cudaq_rt/_fastcall.abi3.so" \
    "$out/lib/cudaq-rt/python/cudaq_rt/_fastcall.abi3.so"
fi
copy "$build/examples/cudaq_rt_example_app" "$out/examples/cudaq_rt_example_app"
for f in "$build"/examples/*.a; do copy "$f" "$out/examples/${f##*/}"; done
copy "$build/tests/capi/capi_test" "$out/tests/capi/capi_test"
copy "$build/tests/capi/reload_capi" "$out/tests/capi/reload_capi"
for f in loopback_dispatch_test cudaq_rt_fault_app libcudaq_rt_test_hold_pairs.a \
  libcudaq_rt_test_reload_v1.a libcudaq_rt_test_reload_v2.a; do
  copy "$build/tests/gpu/$f" "$out/tests/gpu/$f"
done
for f in loopback_rtt libcudaq_rt_bench_kernels.a libcudaq_rt_bench_warp_kernels.a udp_echo udp_rtt_client \
  capi_call_rtt; do
  copy "$build/bench/$f" "$out/bench/$f"
done
for f in "$build"/lib/libcudaq_rt_nvjitlink*.so; do copy "$f" "$out/lib/${f##*/}"; done
# The runtime library the tools link (they find it as bin/../lib), under its soname only: a
# copy, not a link, so that the bundle travels as plain files.
copy "$(readlink -f "$build/lib/libcudaq_rt.so.0")" "$out/lib/libcudaq_rt.so.0"
mkdir -p "$out/bench/jit_start"
copy "$build/bench/jit_start/jit_start_app" "$out/bench/jit_start/jit_start_app"
cp "$(dirname "$0")/../bench/jit_start/jit_start.sh" "$out/bench/jit_start/"
for set in "$build"/bench/jit_start/n*/; do
  [ -d "$set" ] || continue
  name=$(basename "$set")
  mkdir -p "$out/bench/jit_start/$name"
  for f in "$set"*.fatbin; do copy "$f" "$out/bench/jit_start/$name/${f##*/}"; done
done
du -sh "$out"
