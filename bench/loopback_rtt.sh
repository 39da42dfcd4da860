#!/usr/bin/env bash
# Builds bench/loopback_rtt.cu in several variants (loopback_ring.h's build-time knobs) and runs
# them all, printing one table: where a loopback round trip spends its time.
#
#   loopback_rtt.sh build OUTDIR [BASELINE_SRC [SECOND_SRC]]   (needs nvcc and g++; no GPU)
#   loopback_rtt.sh run OUTDIR                    (on the GPU machine; prints the table)
#
# BASELINE_SRC: a tree holding another version of bridges/loopback and libdispatch (for example
# `git archive HEAD~1 bridges libdispatch runtime/include | tar -x -C DIR`), built as "base";
# SECOND_SRC likewise, built as "interleaved".
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:?build or run} out=${2:?output directory}
nvcc=${NVCC:-nvcc}
cuda_inc=$(dirname "$(command -v "$nvcc")")/../include

build() { # NAME SRCROOT DEFINES...
  local name=$1 src=$2; shift 2
  local inc=(-I"$src/bridges/loopback" -I"$src/libdispatch/include" -I"$src/libdispatch/src"
             -I"$here/runtime/include" -I"$cuda_inc")
  g++ -O2 -std=c++20 -c "$src/bridges/loopback/loopback.cpp" "${inc[@]}" "$@" -o "$out/$name.host.o"
  "$nvcc" -O3 -std=c++20 -arch=sm_90 "${inc[@]}" "$@" "$here/bench/loopback_rtt.cu" \
          "$out/$name.host.o" -o "$out/loopback_rtt.$name"
  rm -f "$out/$name.host.o"
}

case $cmd in
build)
  mkdir -p "$out"
  if [ -n "${3:-}" ]; then build base "$3"; fi
  if [ -n "${4:-}" ]; then build interleaved "$4"; fi
  build new "$here"
  build new-probe1 "$here" -DCUDAQ_RT_LOOPBACK_PROBE_SLOTS=1u
  build new-probe8 "$here" -DCUDAQ_RT_LOOPBACK_PROBE_SLOTS=8u
  build new-wc "$here" -DCUDAQ_RT_LOOPBACK_REQUEST_WC=1
  ;;
run)
  set +e
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  any=$(ls "$out"/loopback_rtt.* | head -n 1)
  for loads in 1 33; do
    "$any" --mode floor --wc 1 --loads $loads --label "floor loads=$loads" | grep ROW
  done
  for bin in "$out"/loopback_rtt.*; do
    v=${bin##*/loopback_rtt.}
    "$bin" --label "$v" | grep -E 'ROW|STAGES'
  done
  for bin in "$out"/loopback_rtt.interleaved "$out"/loopback_rtt.new; do
    [ -x "$bin" ] || continue
    v=${bin##*/loopback_rtt.}
    "$bin" --label "$v slot_size=32" --config slots=64,slot_size=32 | grep -E 'ROW|STAGES'
  done
  ;;
*) echo "usage: $0 build|run OUTDIR [BASELINE_SRC]" >&2; exit 2 ;;
esac
