#!/usr/bin/env bash
# Two builds of a loopback bridge, or two shapes of the warp dispatcher, against each other on this
# machine's GPU, in alternating rounds (bench/payload_sizes.md holds results): the example
# package's echo through cudaq-rt-run --bench, 8-byte requests at 256 in flight on the warp
# dispatcher with one and with two feeders and at 1,024 in flight with four, 960-byte requests at
# 256 in flight, and 8-byte requests at 1 and 16 in flight; then the unified kernel's 8-byte round
# trip at 1 in flight. Prints one line per row; asserts nothing.
#
#   bridge_ab.sh BUILD_DIR A B [ROUNDS] [FLOOR_CU]
#
# BUILD_DIR: a build tree or a bundle of one (scripts/gpu-bundle.sh). A, B: NAME[@BLOCKS], a bridge
# name under BUILD_DIR/lib/cudaq-rt/bridges (loopback, or a variant from bench/CMakeLists.txt such
# as loopback_wc), and the blocks the warp dispatcher is launched as (--grid BLOCKS,32: that many
# serving warps; default 1; the unified kernel's row is the same either way): loopback loopback@2
# compares one warp with two. ROUNDS: default 3. FLOOR_CU: ../shared/probe/floor.cu or another
# copy, built with nvcc and run before and after the rounds. Link results go to a fresh cache.
set -euo pipefail
build=${1:?build directory} a=${2:?first bridge} b=${3:?second bridge} rounds=${4:-3} floor=${5:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CUDAQ_RT_BRIDGE_PATH="$build/lib/cudaq-rt/bridges" CUDAQ_RT_CACHE_DIR="$tmp/cache"
for side in "$a" "$b"; do
  name=${side%@*}
  [ -f "$CUDAQ_RT_BRIDGE_PATH/libcudaq_rt_bridge_$name.so" ] ||
    { echo "bridge_ab.sh: no bridge '$name' in $CUDAQ_RT_BRIDGE_PATH" >&2; exit 2; }
  [[ $side != *@* || ${side#*@} =~ ^[1-9][0-9]*$ ]] ||
    { echo "bridge_ab.sh: '$side': the blocks after @ are a positive number" >&2; exit 2; }
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
if [ -n "$floor" ]; then
  nvcc -O3 -arch=native -o "$tmp/floor" "$floor"
  "$tmp/floor" 100000 | tail -n 2
fi
bash "$(dirname "$0")/../tests/gpu/link_example.sh" "$build/bin/cudaq-rt-pack" \
  "$build/bin/cudaq-rt-link" "$build/examples/cudaq_rt_example_app" "$tmp/example" >/dev/null
pkg=$tmp/example/example.cudaqpkg
python3 -c "import sys
open(sys.argv[1], 'wb').write(bytes(range(1, 9)))
open(sys.argv[2], 'wb').write(bytes(i % 251 for i in range(960)))" "$tmp/p8" "$tmp/p960"

row() { # LABEL SIDE PAYLOAD REQUESTS IN_FLIGHT [cudaq-rt-run options...]
  local label=$1 side=$2 payload=$3 n=$4 k=$5 out shape=()
  shift 5
  # The blocks go with the warp dispatcher's rows only.
  [[ $side == *@* && " $* " == *" warp "* ]] && shape=(--grid "${side#*@},32")
  out=$("$build/bin/cudaq-rt-run" "$pkg" --call echo --arg "@$tmp/$payload" --bench "$n" \
    --inflight "$k" --json --bridge "${side%@*}" "${shape[@]}" "$@" 2>&1) || true
  printf '%s' "$out" | python3 -c "
import json, sys
label, text = sys.argv[1], sys.stdin.read()
try:
    bench = json.loads(text)['bench']
    lat = bench['latency_us']
    print('%-36s %8.3f M/s  p50 %8.2f  p99 %8.2f  wrong %d'
          % (label, bench['requests_per_s'] / 1e6, lat['p50'], lat['p99'], bench['wrong']))
except (ValueError, KeyError):
    print('%-36s failed: %s' % (label, text.strip()[-300:]))" "$label"
}

warp=(--dispatcher warp)
for ((r = 1; r <= rounds; ++r)); do
  echo "-- round $r"
  for feeders in 1 2; do
    for bridge in "$a" "$b"; do
      row "warp 8 B @256 feeders=$feeders $bridge" "$bridge" p8 2000000 256 "${warp[@]}" \
        --bridge-arg "slots=256,slot_size=1024,feeders=$feeders"
    done
  done
  for bridge in "$a" "$b"; do
    row "warp 8 B @1024 feeders=4 $bridge" "$bridge" p8 4000000 1024 "${warp[@]}" \
      --bridge-arg "slots=1024,slot_size=1024,feeders=4"
  done
  for bridge in "$a" "$b"; do
    row "warp 960 B @256 $bridge" "$bridge" p960 200000 256 "${warp[@]}" \
      --bridge-arg slots=256,slot_size=1024
  done
  for k in 1 16; do
    for bridge in "$a" "$b"; do
      row "warp 8 B @$k $bridge" "$bridge" p8 $((k == 1 ? 20000 : 100000)) "$k" "${warp[@]}" \
        --bridge-arg slots=256,slot_size=1024
    done
  done
  for bridge in "$a" "$b"; do
    row "unified 8 B @1 $bridge" "$bridge" p8 20000 1 --bridge-arg slots=256,slot_size=16448
  done
done
[ -z "$floor" ] || "$tmp/floor" 100000 | tail -n 2
