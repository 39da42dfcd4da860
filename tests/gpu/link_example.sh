#!/usr/bin/env bash
# Fixture for the GPU tests: packs the example application and links it with the real tools for
# sm_80, sm_90 and, where nvidia-smi names one, this machine's GPU.
#   link_example.sh PACK LINK APP OUTDIR
set -euo pipefail
pack=$1 link=$2 app=$3 out=$4
archs=sm_80,sm_90
if command -v nvidia-smi >/dev/null 2>&1 &&
   cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1) &&
   [ -n "$cc" ]; then
  case ",$archs," in *",sm_${cc/./},"*) ;; *) archs="$archs,sm_${cc/./}" ;; esac
fi
rm -rf "$out" && mkdir -p "$out"
"$pack" "$app" --name example -o "$out"
"$link" "$out/example.cudaqpkg" --arch "$archs"
"$link" "$out/example.cudaqpkg" --arch "$archs" --dispatcher warp
