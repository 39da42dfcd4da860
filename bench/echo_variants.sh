#!/usr/bin/env bash
# The example app again with the echo's bulk-copy-engine threshold changed (decode.cu's
# CUDAQ_RT_EXAMPLE_ECHO_ENGINE_BYTES), for bench/payload_sizes.py --app-row: the same handlers and
# build flags as examples/CMakeLists.txt, only decode.cu compiled again.
#
#   echo_variants.sh BUILD OUT BYTES...     writes OUT/cudaq_rt_example_app.engine_BYTES each
#
# BYTES 4294967295 never takes the engine (the thread's own loads, as before the engine path).
set -euo pipefail
build=$(cd "$1" && pwd)
out=$2
shift 2
src=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${CUDAQ_RT_NVCC:-/usr/local/cuda/bin/nvcc}
objs=$build/examples/CMakeFiles/cudaq_rt_example_app.dir/handlers
flags=(-I"$src/libdispatch/include" -O2 -rdc=true
       "-gencode=arch=compute_80,code=[sm_80,lto_80]" "-gencode=arch=compute_90,code=[sm_90,lto_90]"
       -std=c++17)
mkdir -p "$out"
for bytes in "$@"; do
  work=$out/engine_$bytes.d
  mkdir -p "$work"
  "$nvcc" "${flags[@]}" -DCUDAQ_RT_EXAMPLE_ECHO_ENGINE_BYTES="$bytes" -x cu -c \
    "$src/examples/handlers/decode.cu" -o "$work/decode.cu.o"
  others=("$objs/arith.cu.o" "$objs/bits.cu.o" "$objs/lut.cu.o")
  "$nvcc" -arch=sm_80 -Wno-deprecated-gpu-targets -Xcompiler=-fPIC -shared -dlink \
    "${others[@]}" "$work/decode.cu.o" "$objs/main.cpp.o" -o "$work/dlink.o"
  c++ "${others[@]}" "$work/decode.cu.o" "$objs/main.cpp.o" "$work/dlink.o" \
    -o "$out/cudaq_rt_example_app.engine_$bytes" -L/usr/local/cuda/targets/x86_64-linux/lib \
    -lcudadevrt -lcudart_static -lrt -lpthread -ldl
  rm -rf "$work"
done
