#!/usr/bin/env bash
# Packs the two versions of tests/gpu/reload_handlers.cu as OUT/v1.cudaqpkg and OUT/v2.cudaqpkg,
# unlinked (the C API links them at load, for the GPU it runs on):
#   pack_reload.sh CUDAQ_RT_PACK LIBV1.a LIBV2.a OUT
set -euo pipefail
pack=$1 v1=$2 v2=$3 out=$4
rm -rf "$out"
"$pack" "$v1" --name v1 -o "$out" >/dev/null
"$pack" "$v2" --name v2 -o "$out" >/dev/null
test -f "$out/v1.cudaqpkg/manifest.json" && test -f "$out/v2.cudaqpkg/manifest.json"
