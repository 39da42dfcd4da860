#!/usr/bin/env python3
"""link_bench: what a cudaq-rt-link costs, by arch, option, parallelism and cache state.

Usage:
  cmake --build build --target bench_link
  bench/link_bench.py --pack build/bin/cudaq-rt-pack --link build/bin/cudaq-rt-link
                      [--nvcc nvcc] [--include libdispatch/include] [--runs N] [--jobs N]
                      [--tmp DIR] [--scale 10,100,1000 [--scale-archs sm_80,sm_90,sm_100]
                      [--whole-max N]]

Two handler sets are compiled with nvcc (relocatable, sm_80 cubin + lto_80 LTO-IR) and packed:
  - small:  examples/handlers (3 translation units, 4 handlers, no other kernels);
  - medium: generated, 3 translation units x 12 templated handlers with loops and float/int
            arithmetic, plus 12 templated __global__ kernels per unit that nothing launches.
For each set it times the whole `cudaq-rt-link` process (wall clock, median of N runs; the
process start and the loading of the 98 MB libnvJitLink are part of what a build step pays):
  - one arch (sm_80, sm_90), cold (--no-cache), with -kernels-used (the default) and without
    (--no-kernels-used);
  - three archs (sm_80,sm_90,sm_100), cold, -j 1 and -j N;
  - sm_90 into a fresh cache directory (a miss, then a store) and again (a hit).
Every row also shows the cubin size and, for cold links, nvJitLink's own link time from --json.

With --scale N[,N...] it runs the per-TU against whole-program benchmark instead (bench/link_bench.md):
N generated trivial handlers in 10 translation units, for each arch of --scale-archs and both
--lto modes: a cold link into an empty cache, then a link after one translation unit changed
(recompiled and repacked, the same cache). Each row shows the wall time of the cudaq-rt-link process
and its peak memory (the child's max RSS, from wait4). The whole-program link grows with N (about
100 s per arch at N=1000 on 2 cores): above --whole-max handlers it runs for sm_90 only.
It measures and asserts nothing; it is not part of the test run.
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HANDLERS = os.path.join(ROOT, "examples", "handlers")

# One generated translation unit: TU is its number, so names do not collide across units.
MEDIUM_TU = r"""
#include "cudaq_rt/exports.h"
#include <stdint.h>

namespace {
// A handler whose work depends on N: a polynomial over the input, a small recurrence and an
// integer mix, so that every instantiation is real, distinct code.
template <int N>
__device__ int work(const void *input, void *output, uint32_t arg_len, uint32_t max_result_len,
                    uint32_t *result_len) {
  if (arg_len % 4 != 0 || max_result_len < arg_len + 8)
    return 1;
  const float *in = static_cast<const float *>(input);
  float *out = static_cast<float *>(output);
  uint32_t n = arg_len / 4;
  float acc = 0.f;
  uint32_t mix = 2166136261u ^ N;
  for (uint32_t i = 0; i < n; ++i) {
    float x = in[i], p = 0.f;
#pragma unroll
    for (int k = N % 5 + 3; k >= 0; --k)
      p = p * x + static_cast<float>(k * N + 1) / (k + 2);
    for (int r = 0; r < N % 7 + 2; ++r)
      p = fmaf(p, 0.5f + r * 0.125f, sqrtf(fabsf(p) + N));
    out[i] = p;
    acc += p;
    mix = (mix ^ __float_as_uint(p)) * 16777619u;
    mix ^= mix >> (N % 13 + 1);
  }
  out[n] = acc;
  reinterpret_cast<uint32_t *>(out)[n + 1] = mix;
  *result_len = arg_len + 8;
  return 0;
}

} // namespace

// External linkage, so that only -kernels-used drops it.
template <int N>
__global__ void unused_kernel(float *y, const float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float v = x[i];
  for (int k = 0; k < N + 8; ++k)
    v = fmaf(v, sinf(v + k), cosf(v * N));
  y[i] = v;
}

#define HANDLER(K)                                                                                 \
  CUDAQ_RT_EXPORT_HANDLER(work<TU * 100 + K>, h_TU_##K);                                           \
  template __global__ void unused_kernel<TU * 100 + K>(float *, const float *, int);
"""


def medium_source(tu):
    """Translation unit `tu` of the medium set: handlers h_<tu>_0 .. h_<tu>_11."""
    return (MEDIUM_TU.replace("TU", str(tu))
            + "".join(f"HANDLER({k})\n" for k in range(12)))


# One generated translation unit of the scale benchmark: K trivial handlers, distinct code each;
# SALT changes the unit's code without changing its exports (the one-unit change).
SCALE_HANDLER = r"""
static __device__ int h_TU_K(const void *input, void *output, uint32_t arg_len,
                             uint32_t max_result_len, uint32_t *result_len) {
  if (max_result_len < 4)
    return 1;
  uint32_t x = 2166136261u ^ (TU * 7919u + K * 104729u + SALT);
  for (uint32_t i = 0; i < arg_len; ++i)
    x = (x ^ static_cast<const uint8_t *>(input)[i]) * 16777619u;
  *static_cast<uint32_t *>(output) = x;
  *result_len = 4;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER(h_TU_K, h_TU_K);
"""


def scale_source(tu, handlers, salt):
    body = "".join(SCALE_HANDLER.replace("TU", str(tu)).replace("SALT", str(salt))
                   .replace("_K", f"_{k}").replace(" K ", f" {k} ") for k in range(handlers))
    return '#include "cudaq_rt/exports.h"\n#include <stdint.h>\n' + body


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"link_bench: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r


def build_sets(args, tmp):
    flags = ["-rdc=true", "-gencode", "arch=compute_80,code=[sm_80,lto_80]", "-std=c++17",
             "-I" + args.include]
    compiles, sets = [], {"small": [], "medium": []}
    for name in ("arith", "decode", "bits"):
        out = os.path.join(tmp, f"small_{name}.o")
        compiles.append([args.nvcc, *flags, "-c", os.path.join(HANDLERS, name + ".cu"), "-o", out])
        sets["small"].append(out)
    for tu in range(1, 4):
        src = os.path.join(tmp, f"medium_{tu}.cu")
        with open(src, "w") as f:
            f.write(medium_source(tu))
        out = os.path.join(tmp, f"medium_{tu}.o")
        compiles.append([args.nvcc, *flags, "-c", src, "-o", out])
        sets["medium"].append(out)
    print(f"compiling {len(compiles)} translation units ...", file=sys.stderr)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:
        list(ex.map(run, compiles))
    packages = {}
    for name, objs in sets.items():
        run([args.pack, "-o", tmp, "-n", name, *objs])
        packages[name] = os.path.join(tmp, name + ".cudaqpkg")
    return packages


def timed_link(args, pkg, link_args, env, prepare=None):
    """(median wall ms, median nvJitLink ms, cubin bytes by arch, cache hits) over args.runs."""
    walls, nvj, sizes, hits = [], [], {}, []
    for _ in range(args.runs):
        if prepare:
            prepare()
        start = time.perf_counter()
        r = run([args.link, pkg, "--json", *link_args], env)
        walls.append((time.perf_counter() - start) * 1e3)
        doc = json.loads(r.stdout)
        nvj.append(sum(a["cubin"]["link_ms"] for a in doc["archs"] if not a["cache_hit"]))
        sizes = {a["arch"]: a["cubin"]["size"] for a in doc["archs"]}
        hits.append(all(a["cache_hit"] for a in doc["archs"]))
    return statistics.median(walls), statistics.median(nvj), sizes, all(hits)


def measured(cmd, env):
    """(wall s, CPU s, peak RSS MB, --json document) of one cudaq-rt-link run; exits on failure.
    CPU time (user + system) and the peak are the child's own, from wait4."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:
        out, err = ex.submit(proc.stdout.read), ex.submit(proc.stderr.read)
        _, status, usage = os.wait4(proc.pid, 0)
        out, err = out.result().decode(), err.result().decode()
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"link_bench: {' '.join(cmd)} failed ({proc.returncode}):\n{out}{err}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, json.loads(out)


def scale_bench(args, tmp):
    flags = ["-rdc=true", "-gencode", "arch=compute_80,code=[sm_80,lto_80]", "-std=c++17",
             "-I" + args.include]
    tus = 10
    rows = []
    load = os.getloadavg()
    for n in args.scale:
        per = max(1, n // tus)
        d = os.path.join(tmp, f"n{n}")
        os.makedirs(d)

        def build(tu, salt):
            src = os.path.join(d, f"tu{tu}.cu")
            with open(src, "w") as f:
                f.write(scale_source(tu, per, salt))
            run([args.nvcc, *flags, "-c", src, "-o", os.path.join(d, f"tu{tu}.o")])

        def pack():
            run([args.pack, "-o", d, "-n", "scale", "--force",
                 *[os.path.join(d, f"tu{t}.o") for t in range(tus)]])
            return os.path.join(d, "scale.cudaqpkg")

        print(f"N={n}: compiling {tus} translation units of {per} handlers ...", file=sys.stderr)
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:
            list(ex.map(lambda t: build(t, 0), range(tus)))
        for arch in args.scale_archs:
            for mode in ("per-tu", "whole"):
                if mode == "whole" and per * tus > args.whole_max and arch != "sm_90":
                    continue
                build(0, 0)
                pkg = pack()
                cache = os.path.join(d, f"cache-{arch}-{mode}")
                shutil.rmtree(cache, ignore_errors=True)
                env = dict(os.environ, CUDAQ_RT_CACHE_DIR=cache)
                env.pop("CUDAQ_RT_CACHE_DISABLE", None)
                cmd = [args.link, pkg, "-a", arch, "--lto", mode, "--no-store", "--json",
                       "-j", str(args.jobs)]
                print(f"  {arch} {mode} cold ...", file=sys.stderr)
                wall, cpu, rss, doc = measured(cmd, env)
                a = doc["archs"][0]
                rows.append((n, arch, mode, "cold", wall, cpu, rss, a["cubin"]["size"],
                             units_summary(a)))
                if mode == "whole" and per * tus > args.whole_max:
                    continue  # a change relinks the whole program: the same again
                build(0, 1)
                pkg = pack()
                print(f"  {arch} {mode} after a one-unit change ...", file=sys.stderr)
                wall, cpu, rss, doc = measured(cmd, env)
                a = doc["archs"][0]
                rows.append((n, arch, mode, "one TU changed", wall, cpu, rss, a["cubin"]["size"],
                             units_summary(a)))
    print(f"cudaq-rt-link, one process per row (wall s; CPU s and peak RSS of the process); 10 "
          f"translation units; -j {args.jobs}; {os.cpu_count()} cores; load average "
          f"{load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    head = ("N", "arch", "--lto", "state", "wall s", "CPU s", "peak MB", "cubin bytes", "units")
    table = [head] + [(str(n), a, m, st, f"{w:.2f}", f"{c:.2f}", f"{r:.0f}", str(b), u)
                      for n, a, m, st, w, c, r, b, u in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for k, r in enumerate(table):
        print("| " + " | ".join(c.ljust(widths[i]) for i, c in enumerate(r)) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def units_summary(a):
    """'3 cached, 8 compiled' for a per-TU link, '-' otherwise."""
    units = a.get("units", [])
    if not units:
        return "module cached" if a["cache_hit"] else "-"
    hit = sum(u["source"] == "cache" for u in units)
    built = sum(u["source"] == "compiled" for u in units)
    return f"{hit} cached, {built} compiled"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pack", default=shutil.which("cudaq-rt-pack"))
    p.add_argument("--link", default=shutil.which("cudaq-rt-link"))
    p.add_argument("--nvcc", default=os.environ.get("NVCC", "nvcc"))
    p.add_argument("--include", default=os.path.join(ROOT, "libdispatch", "include"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    p.add_argument("--tmp")
    p.add_argument("--scale", type=lambda s: [int(x) for x in s.split(",")],
                   help="per-TU against whole-program for these handler counts, e.g. 10,100,1000")
    p.add_argument("--scale-archs", type=lambda s: s.split(","),
                   default=["sm_80", "sm_90", "sm_100"])
    p.add_argument("--whole-max", type=int, default=100,
                   help="above this many handlers, the whole-program link runs for sm_90 only")
    args = p.parse_args()
    if not args.pack or not args.link:
        sys.exit("link_bench: give --pack and --link")

    tmp = tempfile.mkdtemp(prefix="link_bench.", dir=args.tmp)
    if args.scale:
        try:
            scale_bench(args, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    try:
        packages = build_sets(args, tmp)
        env = dict(os.environ)
        env.pop("CUDAQ_RT_CACHE_DISABLE", None)
        env["CUDAQ_RT_CACHE_DIR"] = os.path.join(tmp, "cache")
        rows = []
        three = "sm_80,sm_90,sm_100"
        for name, pkg in packages.items():
            cold = ["--no-cache", "--no-store"]
            for arch in ("sm_80", "sm_90"):
                for label, extra in (("-kernels-used", []), ("--no-kernels-used",
                                                             ["--no-kernels-used"])):
                    wall, nvj, sizes, _ = timed_link(args, pkg, ["-a", arch, *cold, *extra], env)
                    rows.append((name, arch, f"cold, {label}", wall, nvj, sizes[arch]))
            for jobs in (1, args.jobs):
                wall, nvj, sizes, _ = timed_link(args, pkg, ["-a", three, "-j", str(jobs), *cold],
                                                 env)
                rows.append((name, three, f"cold, -j {jobs}", wall, nvj, sum(sizes.values())))
            cache = os.path.join(tmp, f"cache-{name}")
            cenv = dict(env, CUDAQ_RT_CACHE_DIR=cache)
            wall, nvj, sizes, hit = timed_link(
                args, pkg, ["-a", "sm_90", "--no-store"], cenv,
                prepare=lambda: shutil.rmtree(cache, ignore_errors=True))
            assert not hit
            rows.append((name, "sm_90", "fresh cache (miss + store)", wall, nvj, sizes["sm_90"]))
            wall, nvj, sizes, hit = timed_link(args, pkg, ["-a", "sm_90", "--no-store"], cenv)
            rows.append((name, "sm_90", "cache hit" if hit else "cache hit (MISSED)", wall, None,
                         sizes["sm_90"]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"cudaq-rt-link, wall ms per process (median of {args.runs}); nvJitLink ms = sum of "
          f"link_ms over the archs linked; {os.cpu_count()} cores")
    head = ("set", "arch", "mode", "wall ms", "nvJitLink ms", "cubin bytes")
    table = [head] + [(s, a, m, f"{w:.0f}", "-" if n is None else f"{n:.0f}", str(b))
                      for s, a, m, w, n, b in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for k, r in enumerate(table):
        print("| " + " | ".join(c.ljust(widths[i]) if i < 3 else c.rjust(widths[i])
                                for i, c in enumerate(r)) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


if __name__ == "__main__":
    main()
