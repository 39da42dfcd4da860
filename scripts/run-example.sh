#!/usr/bin/env bash
# The main job: set up, build, pack the bundled example handlers, link them ahead of time for
# sm_80 and sm_90 (and this machine's GPU), and, where a GPU is present, call and benchmark them
# with cudaq-rt-run (load the linked module, launch the unified dispatch kernel, serve through the
# loopback bridge). Without a GPU it says what it would run, and stops after the link.
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

run="$bin/cudaq-rt-run $out/example.cudaqpkg"
table=examples/lut/syndrome_table.bin
calls=(
  "--call sum_i32 --arg i32:1,2,3,-10 --result i64"
  "--call axpy_f32 --arg f32:2,1,2,3,10,20,30 --result f32"
  "--call parity --arg hex:0103ff --result hex"
  "--call echo --arg str:hello --result str"
  "--call lut_decode --arg hex:01020308 --global cudaq_rt_example_lut=@$table"
  "--bench 20000"
  "--bench 100000 --inflight 32"
  "--dispatcher warp --bridge-arg slots=256 --bench 1000000 --inflight 256"
)

if [ -z "$gpu_arch" ]; then
  echo "== no GPU on this machine: stopping after the link (the cubins are in $out/example.cudaqpkg)"
  echo "   on a GPU, this would run:"
  for c in "${calls[@]}"; do echo "   $run $c"; done
  echo "   PYTHONPATH=python python3 examples/python/quickstart.py $out/example.cudaqpkg"
  exit 0
fi

echo "== run on $gpu_arch (cudaq-rt-run, loopback bridge)"
for c in "${calls[@]}"; do
  echo "\$ cudaq-rt-run example.cudaqpkg $c"
  # shellcheck disable=SC2086
  $run $c
done

echo "== the same from Python, in process (examples/python/quickstart.py)"
if python3 -c 'import numpy' 2>/dev/null; then
  PYTHONPATH=$PWD/python python3 examples/python/quickstart.py "$out/example.cudaqpkg"
else
  echo "   skipped: numpy is not installed for $(command -v python3)"
fi
