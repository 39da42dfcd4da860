#!/usr/bin/env python3
"""lto_modes: what each cudaq-rt-link --lto mode costs a request, on a GPU (bench/link_bench.md).

Usage:
  bench/lto_modes.py --pack cudaq-rt-pack --link cudaq-rt-link --run cudaq-rt-run
                     --app cudaq_rt_example_app [--requests 100000] [--reps 3] [--arch sm_90]

Packs the example application, links it for this GPU once per mode (--lto per-tu, --lto whole;
each into a package and a cache of its own), then benchmarks handlers with cudaq-rt-run --bench
(--no-link, --lto MODE: each package serves only its own mode's cubin): echo (8 bytes), parity
(64 bytes; it calls popcount_bytes in another translation unit: a real call per TU, inlinable
whole), sum_i32 (16 values) and axpy_f32 (8 values), one request at a time and 64 in flight. The
modes alternate within each repetition; the table shows the median of the repetitions. It measures
and asserts nothing; it is not part of the test run. Without a GPU, cudaq-rt-run says so and
this stops.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

MODES = ("per-tu", "whole")
CASES = [
    ("echo", []),
    ("parity", ["--call", "parity", "--arg", "hex:" + "a5" * 64]),
    ("sum_i32", ["--call", "sum_i32", "--arg", "i32:" + ",".join(str(i) for i in range(16))]),
    ("axpy_f32", ["--call", "axpy_f32", "--arg", "f32:2," + ",".join(["1.5"] * 16)]),
]


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"lto_modes: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r


def gpu_arch():
    smi = shutil.which("nvidia-smi")
    r = smi and subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
                               capture_output=True, text=True)
    if not r or r.returncode != 0 or not r.stdout.strip():
        sys.exit("lto_modes: no GPU (nvidia-smi found none); give --arch to link only")
    return "sm_" + r.stdout.split()[0].replace(".", "")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pack", required=True)
    p.add_argument("--link", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--app", required=True)
    p.add_argument("--requests", type=int, default=100000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--arch")
    args = p.parse_args()
    arch = args.arch or gpu_arch()

    tmp = tempfile.mkdtemp(prefix="lto_modes.")
    try:
        run([args.pack, args.app, "-n", "example", "-o", tmp])
        pkgs, links = {}, {}
        for mode in MODES:
            d = os.path.join(tmp, mode)
            pkgs[mode] = shutil.copytree(os.path.join(tmp, "example.cudaqpkg"),
                                         os.path.join(d, "example.cudaqpkg"))
            env = dict(os.environ, CUDAQ_RT_CACHE_DIR=os.path.join(d, "cache"))
            doc = json.loads(run([args.link, pkgs[mode], "-a", arch, "--lto", mode, "--json"],
                                 env).stdout)
            a = doc["archs"][0]
            links[mode] = (a["lto"], a["cubin"]["link_ms"], a["cubin"]["size"])
        results = {}
        for rep in range(args.reps):
            for name, call in CASES:
                for inflight in (1, 64):
                    for mode in (MODES if rep % 2 == 0 else MODES[::-1]):
                        doc = json.loads(run([args.run, pkgs[mode], "--lto", mode, "--no-link",
                                              "--bench", str(args.requests), "--inflight",
                                              str(inflight), *call, "--json"]).stdout)
                        b = doc["bench"]
                        results.setdefault((name, inflight, mode), []).append(
                            (b["latency_us"]["p50"], b["latency_us"]["p99"],
                             b["requests_per_s"]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"{arch}: the example application linked per mode (mode done, nvJitLink ms, cubin "
          f"bytes): " + "; ".join(f"{m} {l[0]} {l[1]:.0f} ms {l[2]} B" for m, l in links.items()))
    print(f"cudaq-rt-run --bench {args.requests}, median of {args.reps} runs per row")
    print("| handler | in flight | --lto | p50 us | p99 us | requests/s |")
    print("|---|---|---|---|---|---|")
    for (name, inflight, mode), rows in results.items():
        med = [statistics.median(col) for col in zip(*rows)]
        print(f"| {name} | {inflight} | {mode} | {med[0]:.2f} | {med[1]:.2f} | {med[2]:,.0f} |")


if __name__ == "__main__":
    main()
