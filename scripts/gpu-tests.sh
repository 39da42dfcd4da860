#!/usr/bin/env bash
# Runs the GPU tests from a build tree or a bundle made by scripts/gpu-bundle.sh, the way ctest
# runs them (tests/gpu/CMakeLists.txt), for a GPU machine without cmake's build tree:
#   gpu-tests.sh BUILD_OR_BUNDLE [TEST...]
# TEST: loopback, run, dispatch, udp, reload, python, capi, whole (default: all of them). whole: the loopback and
# C API checks over the example package linked --lto whole (handlers called directly).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
b=$(cd "${1:?build directory or bundle}" && pwd)
shift
only=" ${*:-loopback run dispatch udp reload python capi whole} "
want() { [[ $only == *" $1 "* ]]; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CUDAQ_RT_BRIDGE_PATH="$b/lib/cudaq-rt/bridges" CUDAQ_RT_CACHE_DIR="$tmp/cache"
status=0
# loopback PACKAGE [ARGS...]: the loopback protocol test over PACKAGE.
loopback() {
  local pkg=$1
  shift
  "$b/tests/gpu/loopback_dispatch_test" \
    --bridge "$b/lib/cudaq-rt/bridges/libcudaq_rt_bridge_loopback.so" --package "$pkg" "$@" ||
    status=1
}
echo "== gpu.example_package + gpu.loopback_dispatch"
if bash "$here/tests/gpu/link_example.sh" "$b/bin/cudaq-rt-pack" "$b/bin/cudaq-rt-link" \
     "$b/examples/cudaq_rt_example_app" "$tmp/example" >/dev/null; then
  if want loopback; then
    loopback "$tmp/example/example.cudaqpkg"
    echo "== gpu.loopback_dispatch_warp"
    loopback "$tmp/example/example.cudaqpkg" --dispatcher warp --slots 256 --many 1000000
    echo "== gpu.loopback_dispatch_warp_feeders"
    loopback "$tmp/example/example.cudaqpkg" --dispatcher warp --slots 256 \
      --bridge-arg feeders=2 --many 1000000 --only-many
    echo "== gpu.loopback_dispatch_warp2"
    loopback "$tmp/example/example.cudaqpkg" --dispatcher warp --slots 256 --grid 2,32 \
      --many 1000000 --mixed 1000000
    echo "== gpu.loopback_dispatch_warp4_feeders"
    loopback "$tmp/example/example.cudaqpkg" --dispatcher warp --slots 512 --grid 4,32 \
      --bridge-arg feeders=4 --many 1000000 --only-many
    echo "== gpu.loopback_dispatch_lanes"
    loopback "$tmp/example/example.cudaqpkg" --layout lanes --mixed 1000000
    echo "== gpu.loopback_dispatch_warp_slots"
    loopback "$tmp/example/example.cudaqpkg" --dispatcher warp --slots 256 --layout slots \
      --many 100000 --mixed 1000000
    echo "== gpu.loopback_dispatch_bulk"
    loopback "$tmp/example/example.cudaqpkg" --slot-size 16448 --mixed 1000000
    echo "== gpu.loopback_dispatch_bulk33"
    loopback "$tmp/example/example.cudaqpkg" --slot-size 16448 --bulk 33 --mixed 100000
    echo "== gpu.loopback_dispatch_warp_bulk"
    loopback "$tmp/example/example.cudaqpkg" --dispatcher warp --slots 256 --slot-size 16448 \
      --bulk 33 --mixed 1000000
    echo "== gpu.loopback_dispatch_cells"
    loopback "$tmp/example/example.cudaqpkg" --slot-size 16448 --bulk 0 --mixed 100000
    echo "== gpu.hold_pairs_package + gpu.loopback_dispatch_hold_pairs (+ _one_frame)"
    if "$b/bin/cudaq-rt-pack" "$b/examples/cudaq_rt_example_app" --dispatcher \
         "$b/tests/gpu/libcudaq_rt_test_hold_pairs.a" --name hold -o "$tmp/hold" >/dev/null; then
      loopback "$tmp/hold/hold.cudaqpkg" --dispatcher hold_pairs_dispatch --link-at-load \
        --slot-size 16448 --bridge-arg spare_frame=1 --expect-spare --only-mixed --mixed 200000
      echo "== gpu.loopback_dispatch_hold_pairs_one_frame"
      loopback "$tmp/hold/hold.cudaqpkg" --dispatcher hold_pairs_dispatch --link-at-load \
        --slot-size 16448 --only-mixed --mixed 200000
    else
      echo "packing the hold_pairs kernel failed"; status=1
    fi
  fi
else
  echo "link_example.sh failed"; status=1
fi
export CUDAQ_RT_PACK="$b/bin/cudaq-rt-pack" CUDAQ_RT_LINK="$b/bin/cudaq-rt-link" \
  CUDAQ_RT_RUN="$b/bin/cudaq-rt-run" CUDAQ_RT_EXAMPLE_APP="$b/examples/cudaq_rt_example_app" \
  CUDAQ_RT_FAULT_APP="$b/tests/gpu/cudaq_rt_fault_app" \
  CUDAQ_RT_LUT_TABLE="$here/examples/lut/syndrome_table.bin" \
  CUDAQ_RT_TIMED_DISPATCH="$b/examples/libcudaq_rt_example_timed_dispatch.a" \
  CUDAQ_RT_BLOCK_DISPATCH="$b/examples/libcudaq_rt_example_block_dispatch.a" \
  CUDAQ_RT_RPC_INCREMENT="$b/examples/libcudaq_rt_example_rpc_increment.a" \
  CUDAQ_RT_CLIENT="$here/tools/cudaq-rt-client.py" \
  CUDAQ_RT_RELOAD_V1="$b/tests/gpu/libcudaq_rt_test_reload_v1.a" \
  CUDAQ_RT_RELOAD_V2="$b/tests/gpu/libcudaq_rt_test_reload_v2.a" \
  CUDAQ_RT_PREFIX="$b" PYTHONPATH="$here/python"
for t in run dispatch udp reload python; do
  want $t || continue
  echo "== gpu.$t"
  timeout 600 python3 "$here/tests/gpu/test_$t.py" >"$tmp/$t.log" 2>&1 || status=1
  grep -E "^(FAIL|ERROR):|Error|skipped" "$tmp/$t.log" | head -n 20
  tail -n 4 "$tmp/$t.log"
  [ -n "${OUT:-}" ] && cp "$tmp/$t.log" "$OUT/test_$t.log"
done
if want reload; then
  echo "== gpu.reload_packages + gpu.reload_capi"
  if bash "$here/tests/gpu/pack_reload.sh" "$b/bin/cudaq-rt-pack" "$CUDAQ_RT_RELOAD_V1" \
       "$CUDAQ_RT_RELOAD_V2" "$tmp/reload"; then
    CUDAQ_RT_CACHE_DIR="$tmp/reload-cache" timeout 300 "$b/tests/capi/reload_capi" \
      "$tmp/reload/v1.cudaqpkg" "$tmp/reload/v2.cudaqpkg" || status=1
  else
    echo "pack_reload.sh failed"; status=1
  fi
fi
if want capi; then
  echo "== gpu.capi"
  CUDAQ_RT_CACHE_DIR="$tmp/capi-cache" timeout 120 "$b/tests/capi/capi_test" \
    --gpu "$tmp/example/example.cudaqpkg" || status=1
fi
if want whole; then
  echo "== gpu.example_package_whole + gpu.loopback_dispatch_whole"
  if CUDAQ_RT_LTO=whole bash "$here/tests/gpu/link_example.sh" "$b/bin/cudaq-rt-pack" \
       "$b/bin/cudaq-rt-link" "$b/examples/cudaq_rt_example_app" "$tmp/whole" >/dev/null; then
    loopback "$tmp/whole/example.cudaqpkg"
    echo "== gpu.loopback_dispatch_warp_whole"
    loopback "$tmp/whole/example.cudaqpkg" --dispatcher warp --slots 256 --many 1000000
    echo "== gpu.capi_whole"
    CUDAQ_RT_LTO=whole CUDAQ_RT_CACHE_DIR="$tmp/capi-whole-cache" timeout 120 \
      "$b/tests/capi/capi_test" --gpu "$tmp/whole/example.cudaqpkg" || status=1
  else
    echo "link_example.sh (whole) failed"; status=1
  fi
fi
exit $status
