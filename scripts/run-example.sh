#!/usr/bin/env bash
# The main job: set up, build, pack the bundled example handlers, link them ahead of time for
# sm_80 and sm_90 (and this machine's GPU), and, where a GPU is present, load the linked module,
# launch the unified dispatch kernel and serve the examples through the loopback bridge.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default

bin=build/bin
out=build/example
rm -rf "$out" && mkdir -p "$out"
export CUDAQ_RT_CACHE_DIR=${CUDAQ_RT_CACHE_DIR:-$PWD/build/link-cache}

echo "== pack"
"$bin/cudaq-rt-pack" build/examples/cudaq_rt_example_app --name example -o "$out"

archs="sm_80,sm_90"
gpu_arch=""
if command -v nvidia-smi >/dev/null 2>&1 &&
   cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1) &&
   [ -n "$cc" ]; then
  gpu_arch="sm_${cc/./}"
  case ",$archs," in *",$gpu_arch,"*) ;; *) archs="$archs,$gpu_arch" ;; esac
fi

echo "== link ($archs)"
"$bin/cudaq-rt-link" "$out/example.cudaqpkg" --arch "$archs"
"$bin/cudaq-rt-pack" --list "$out/example.cudaqpkg"

if [ -z "$gpu_arch" ]; then
  echo "== no GPU on this machine: stopping after the link (the cubins are in $out/example.cudaqpkg)"
  exit 0
fi

echo "== run on $gpu_arch"
build/tests/gpu/loopback_dispatch_test --package "$out/example.cudaqpkg"
