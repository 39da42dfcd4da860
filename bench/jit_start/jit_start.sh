#!/usr/bin/env bash
# What the nvJitLink interposer buys an application that links with nvJitLink at every start
# (bench/jit_start.md): jit_start_app's start on this machine's GPU, for 5, 100 and 1,000
# handlers (and 1,000 of 64 mix rounds each, a cubin of several MB), with and without the interposer, with the driver's compute cache and cudaq-rt's link
# cache cold or warm. Prints one markdown table; measures, asserts nothing about times. Exits 1
# when a run failed (an error, or a wrong answer from a handler).
#
#   jit_start.sh BUILD_OR_BUNDLE [INTERPOSER_SO]
#
# BUILD_OR_BUNDLE: a build tree or a bundle from scripts/gpu-bundle.sh (bench/jit_start/
# jit_start_app, bench/jit_start/n<N>/*.fatbin). Without INTERPOSER_SO, or where it is missing,
# only the cases without it run. Cases:
#   a  no interposer, driver cache cold     (a fresh CUDA_CACHE_PATH each run)
#   b  no interposer, driver cache warm     (the last a run's CUDA_CACHE_PATH)
#   c  interposer, both caches cold         (fresh CUDA_CACHE_PATH and CUDAQ_RT_CACHE_DIR each run)
#   d  interposer, driver cache empty, cudaq-rt cache warm (the last c run's; a fresh
#      CUDA_CACHE_PATH each run)
#   e  d with CUDA_CACHE_DISABLE=1
# Warm cases (b, d, e) run JIT_START_WARM_RUNS times (5), cold ones JIT_START_COLD_RUNS times (3;
# 1 at 1,000 handlers and more); each column is its own median. JIT_START_HANDLERS picks the sets
# ("5 100 1000 1000x64"); JIT_START_APP another build of jit_start_app (one compiled against a newer
# nvJitLink header: bench/jit_start.md). CUDA_MODULE_LOADING is EAGER unless set, as CUDA-Q realtime runs. One start of
# the first set comes first and is not shown (the disk and the GPU's wake-up).
set -uo pipefail
b=${1:?build directory or bundle}
interposer=${2:-}
app=${JIT_START_APP:-$b/bench/jit_start/jit_start_app}
[ -x "$app" ] || { echo "jit_start.sh: error: no $app (build jit_start_app)" >&2; exit 1; }
if [ -n "$interposer" ] && [ ! -f "$interposer" ]; then
  echo "jit_start.sh: note: no interposer at $interposer: cases a and b only" >&2
  interposer=
elif [ -z "$interposer" ]; then
  echo "jit_start.sh: note: no interposer given: cases a and b only" >&2
fi
[ -n "$interposer" ] && interposer=$(cd "$(dirname "$interposer")" && pwd)/$(basename "$interposer")
warm_runs=${JIT_START_WARM_RUNS:-5}
cold_runs=${JIT_START_COLD_RUNS:-}
export CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-EAGER}
unset LD_PRELOAD CUDA_CACHE_PATH CUDA_CACHE_DISABLE CUDAQ_RT_CACHE_DIR CUDAQ_RT_CACHE_DISABLE \
  CUDAQ_RT_REMOTE_CACHE
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0

columns=(exec_to_main_ms context_ms link_ms load_ms first_response_ms)
echo "| handlers | case | runs | exec to main | context | link | load | first response | over context | cubin |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"

# field JSON NAME: NAME's value in the app's one-line JSON object.
field() { sed -n "s/.*\"$2\":\"\{0,1\}\([^,}\"]*\).*/\1/p" <<<"$1"; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# run N LOG [VAR=VALUE...]: one start of the app over set N in the environment given (LD_PRELOAD
# among it reaches the app only: the subshell execs it directly); its JSON line on stdout, or a
# failure reported with the app's stderr (status 1).
run() {
  local n=$1 log=$2
  shift 2
  local json rc
  json=$(
    # shellcheck disable=SC2163 # each argument is a VAR=VALUE to export
    export "$@"
    export JIT_START_EXEC_REALTIME=$EPOCHREALTIME
    exec "$app" "$b/bench/jit_start/n$n/"*.fatbin 2>"$log"
  )
  rc=$?
  if [ $rc -ne 0 ] || [ -z "$json" ]; then
    echo "jit_start.sh: error: $n handlers, $*: exit status $rc" >&2
    sed 's/^/  /' "$log" >&2
    return 1
  fi
  echo "$json"
}

# row N CASE JSON...: the medians of the runs' JSON lines as one table row.
row() {
  local n=$1 label=$2
  shift 2
  local -a cells=()
  local c
  for c in "${columns[@]}" over_context; do
    local v
    v=$(for j in "$@"; do
      if [ "$c" = over_context ]; then
        awk -v a="$(field "$j" first_response_ms)" -v b="$(field "$j" process_to_context_ms)" \
          'BEGIN { printf "%.3f\n", a - b }'
      else
        field "$j" "$c" | grep -v null
      fi
    done | median)
    cells+=("$v")
  done
  local cubins
  cubins=$(for j in "$@"; do field "$j" cubin_fnv1a64 | cut -c1-8; done | sort -u | paste -sd/)
  local line="| $n | $label | $# |"
  for c in "${cells[@]}"; do line+=" $c |"; done
  echo "$line ${cubins:--} |"
}

# One start first, not shown: the first process on a machine reads libnvJitLink (98 MB) and the
# driver from disk and wakes the GPU, which would otherwise land in the first set's case a only.
for n in ${JIT_START_HANDLERS:-5 100 1000 1000x64}; do
  compgen -G "$b/bench/jit_start/n$n/*.fatbin" >/dev/null || continue
  mkdir -p "$tmp/warmup"
  run "$n" "$tmp/warmup.log" CUDA_CACHE_PATH="$tmp/warmup" >/dev/null || status=1
  break
done

for n in ${JIT_START_HANDLERS:-5 100 1000 1000x64}; do
  if ! compgen -G "$b/bench/jit_start/n$n/*.fatbin" >/dev/null; then
    echo "jit_start.sh: note: no device code for $n handlers in $b/bench/jit_start/n$n: skipped" >&2
    continue
  fi
  cold=${cold_runs:-$([ "${n%%x*}" -ge 1000 ] && echo 1 || echo 3)}
  d="$tmp/n$n"
  mkdir -p "$d"

  results=()
  for i in $(seq "$cold"); do
    mkdir -p "$d/a$i"
    j=$(run "$n" "$d/log" CUDA_CACHE_PATH="$d/a$i") && results+=("$j") || status=1
  done
  row "$n" "a: no interposer, driver cache cold" "${results[@]}"

  results=()
  for i in $(seq "$warm_runs"); do
    j=$(run "$n" "$d/log" CUDA_CACHE_PATH="$d/a$cold") && results+=("$j") || status=1
  done
  row "$n" "b: no interposer, driver cache warm" "${results[@]}"

  [ -n "$interposer" ] || continue
  results=()
  for i in $(seq "$cold"); do
    mkdir -p "$d/c$i" "$d/rt$i"
    j=$(run "$n" "$d/log" LD_PRELOAD="$interposer" CUDA_CACHE_PATH="$d/c$i" \
      CUDAQ_RT_CACHE_DIR="$d/rt$i") && results+=("$j") || status=1
  done
  row "$n" "c: interposer, both caches cold" "${results[@]}"
  if [ -z "$(find "$d/rt$cold" -type f 2>/dev/null | head -1)" ]; then
    echo "jit_start.sh: note: $n handlers: the interposer stored nothing in $d/rt$cold" >&2
  fi

  results=()
  for i in $(seq "$warm_runs"); do
    mkdir -p "$d/d$i"
    j=$(run "$n" "$d/log" LD_PRELOAD="$interposer" CUDA_CACHE_PATH="$d/d$i" \
      CUDAQ_RT_CACHE_DIR="$d/rt$cold") && results+=("$j") || status=1
  done
  row "$n" "d: interposer, driver cache empty, cudaq-rt cache warm" "${results[@]}"

  results=()
  for i in $(seq "$warm_runs"); do
    mkdir -p "$d/e$i"
    j=$(run "$n" "$d/log" LD_PRELOAD="$interposer" CUDA_CACHE_PATH="$d/e$i" CUDA_CACHE_DISABLE=1 \
      CUDAQ_RT_CACHE_DIR="$d/rt$cold") && results+=("$j") || status=1
  done
  row "$n" "e: d with CUDA_CACHE_DISABLE=1" "${results[@]}"
done
echo
echo "All in ms, medians; over context = first response - (main to a current context); cubin:"
echo "the first 8 hex digits of each distinct linked cubin's FNV-1a-64 (one per set: every case"
echo "loaded the same code). $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
exit $status
