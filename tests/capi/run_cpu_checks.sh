#!/bin/sh
# The C API test program's checks that need no GPU: once as built, then from a copy whose file is
# replaced (by OTHER, another binary) while it runs, which cudaq_rt_open_self must refuse.
# Usage: run_cpu_checks.sh CAPI_TEST OTHER
set -eu
program=$1
other=$2
"$program" --cpu
dir=$(mktemp -d "${TMPDIR:-/tmp}/cudaq-rt-capi.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cp "$program" "$dir/capi_test"
cp "$other" "$dir/replacement"
"$dir/capi_test" --cpu --replace "$dir/replacement"
