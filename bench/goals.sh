#!/usr/bin/env bash
# The request path's goals (bench/payload_sizes.md, "The goals") measured in one run on this
# machine's GPU, each part next to the transport floor; prints, asserts nothing:
#
#   goals.sh BUILD_OR_BUNDLE FLOOR_CU [--quick]
#
# BUILD_OR_BUNDLE: a build tree where `cmake --build BUILD --target bench_loopback_rtt_build` ran,
# or a bundle of one (scripts/gpu-bundle.sh; the bench's loopback_no_lone bridge in it for the
# lone rows' baseline). FLOOR_CU: ../shared/probe/floor.cu. In order:
#   floor.cu A                       one 16-byte word each way over mapped memory
#   bench/probe/warp_cells.cu        stamped cells both ways, moved by one warp (8 B to 4 KB)
#   bench/probe/move_modes.cu        one thread: the engine after a control word, and cells polled
#                                    by the engine
#   loopback_rtt "raw ring:"         the ring's head cells answered from registers (8 B)
#   loopback_rtt "(warp lone turn)"  the unified and warp kernels at 8 B, lone builds and plain
#   payload_sizes.py                 every size through the unified and warp kernels, the copy
#                                    probe, throughput at 32 and 256 in flight
#   udp_rtt.py                       8 B, 1 KB and 16 KB through cudaq-rt-run --serve, and the
#                                    bare UDP echo
#   floor.cu A                       again
# --quick: a fifth of payload_sizes.py's requests and 20,000 of udp_rtt.py's a row.
set -euo pipefail
build=$(cd "${1:?build directory or bundle}" && pwd)
floor_cu=${2:?floor.cu}
quick=${3:-}
if [ -n "$quick" ] && [ "$quick" != --quick ]; then
  echo "usage: goals.sh BUILD_OR_BUNDLE FLOOR_CU [--quick]" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
build_probe() { nvcc -O2 -arch="sm_$arch" -o "$tmp/$2" "$1"; }
build_probe "$floor_cu" floor
build_probe "$here/probe/warp_cells.cu" warp_cells
build_probe "$here/probe/move_modes.cu" move_modes
build_probe "$here/probe/copy_rtt.cu" copy_rtt
section() { printf '\n== %s\n' "$*"; }
floor() { section "floor.cu A ($1)"; "$tmp/floor" | grep '^A'; }

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
floor before
section "warp_cells (one warp, cells both ways)"
"$tmp/warp_cells" 20000 8 64 256 1024 4096
section "move_modes (one thread)"
"$tmp/move_modes" 20000 64 256 1024 4096
section "loopback_rtt: raw ring"
bash "$here/loopback_rtt.sh" "$build" --only "raw ring:"
section "loopback_rtt: the unified and warp kernels, lone builds and plain"
bash "$here/loopback_rtt.sh" "$build" --only "(warp lone turn)"
floor between
section "payload_sizes.py"
python3 "$here/payload_sizes.py" "$build" --floor "$tmp/floor" --copy "$tmp/copy_rtt" \
  ${quick:+--quick}
section "udp_rtt.py"
python3 "$here/udp_rtt.py" --pack "$build/bin/cudaq-rt-pack" --link "$build/bin/cudaq-rt-link" \
  --run "$build/bin/cudaq-rt-run" --app "$build/examples/cudaq_rt_example_app" \
  --echo "$build/bench/udp_echo" --client "$build/bench/udp_rtt_client" --floor "$tmp/floor" \
  --sizes 8,1024,16384 --requests "$([ -n "$quick" ] && echo 20000 || echo 100000)"
floor after
