#!/usr/bin/python3
"""The gap of a hot reload, measured (prints, never asserts): `cudaq-rt-run --serve` over UDP with
8 clients sending `versioned` requests without a pause (8 in flight each), 10 SIGHUP reloads
alternating the two versions of tests/gpu/reload_handlers.cu, alone and beside N more handlers
(a package of 1,000 handlers by default).

  reload_gap.py BUILD_OR_BUNDLE [--handlers 0,1000] [--reloads 10]

Prints per package: the server's gap (hold + swap + launch, from the report) p50 and max, the
time from SIGHUP to the swap done (and the staging in it), and the clients' view: from the last
answer of one version to the first of the next, p50 and max, with the requests lost or wrong.
Needs a GPU and nvcc (the 1,000 handlers are compiled here).
"""
import argparse
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")


def many_handlers(n):
    """CUDA source of n handlers, h0..h{n-1}, each a few instructions, each exported."""
    out = ['#include "cudaq_rt/exports.h"', "#include <stdint.h>"]
    for i in range(n):
        out.append(f"static __device__ int h{i}(const void *in, void *out, uint32_t len, "
                   f"uint32_t cap, uint32_t *rlen) {{ if (cap < 4) return 2; "
                   f"*(uint32_t *)out = len * {i + 3}u + {i}u; *rlen = 4; return 0; }}")
        out.append(f"CUDAQ_RT_EXPORT_HANDLER(h{i}, h{i});")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--handlers", default="0,1000")
    ap.add_argument("--reloads", type=int, default=10)
    args = ap.parse_args()
    b = os.path.abspath(args.build)
    os.environ.update(CUDAQ_RT_PACK=f"{b}/bin/cudaq-rt-pack", CUDAQ_RT_LINK=f"{b}/bin/cudaq-rt-link",
                      CUDAQ_RT_RUN=f"{b}/bin/cudaq-rt-run",
                      CUDAQ_RT_BRIDGE_PATH=f"{b}/lib/cudaq-rt/bridges")
    sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
    import test_reload as tr  # noqa: E402
    from gpu_harness import gpus, link_for, pack_into  # noqa: E402

    arch, count = gpus()
    if not arch:
        print("no GPU: nothing measured")
        return 0
    tmp = tempfile.mkdtemp(prefix="cudaq-rt-reload-gap.")
    env = dict(os.environ, CUDAQ_RT_CACHE_DIR=os.path.join(tmp, "cache"))
    libs = [f"{b}/tests/gpu/libcudaq_rt_test_reload_v{v}.a" for v in (1, 2)]
    shim = unittest.TestCase()
    try:
        for n in [int(x) for x in args.handlers.split(",")]:
            extra = []
            if n:
                src = os.path.join(tmp, f"many{n}.cu")
                with open(src, "w") as f:
                    f.write(many_handlers(n))
                obj = os.path.join(tmp, f"many{n}.o")
                sm = arch[3:]
                t = time.monotonic()
                subprocess.run(["nvcc", "-rdc=true", f"-gencode=arch=compute_{sm},code=[sm_{sm},"
                                f"lto_{sm}]", "-I", os.path.join(ROOT, "libdispatch", "include"),
                                "-c", src, "-o", obj], check=True)
                print(f"compiled {n} handlers in {time.monotonic() - t:.1f} s", file=sys.stderr)
                extra = [obj]
            pkgs = []
            for v in (1, 2):
                pkg = pack_into(tmp, f"n{n}_v{v}", *extra, libs[v - 1])
                t = time.monotonic()
                link_for(pkg, arch, "--bridge", "udp", env=env)
                pkgs.append(pkg)
            size = os.path.getsize(max((os.path.join(pkgs[0], "blobs", "sha256", x) for x in
                                        os.listdir(os.path.join(pkgs[0], "blobs", "sha256"))),
                                       key=os.path.getsize))
            link = os.path.join(tmp, f"current{n}.cudaqpkg")
            tr.flip(link, pkgs[0])
            table = os.path.join(tmp, "table.bin")
            tr.write_atomically(table, tr.table_bytes(1))
            s = tr.Serving(shim, link, "--global", f"{tr.TABLE}=@{table}", env=env)
            seconds = 2.0 + 0.4 * args.reloads
            pool = multiprocessing.Pool(8)
            work = pool.map_async(tr.versioned_worker, [(s.address, seconds, 8,
                                                         bytes([0x30 + i]) * 8, "versioned")
                                                        for i in range(8)])
            time.sleep(1.0)
            for i in range(args.reloads):
                tr.flip(link, pkgs[(i + 1) % 2])
                s.proc.send_signal(signal.SIGHUP)
                s.wait_for(r"cudaq-rt-run: reload \(signal\): swapped", count=i + 1)
                time.sleep(0.3)
            results = work.get(seconds + 60)
            pool.close()
            pool.join()
            doc = s.stop()
            gaps = [sw["gap_ms"] for r in doc["reloads"] for sw in r["swaps"]]
            holds = [sw["hold_ms"] for r in doc["reloads"] for sw in r["swaps"]]
            swaps = [sw["swap_ms"] for r in doc["reloads"] for sw in r["swaps"]]
            loads = [sw["load_ms"] for r in doc["reloads"] for sw in r["swaps"]]
            unloads = [sw["unload_ms"] for r in doc["reloads"] for sw in r["swaps"]]
            took = [r["duration_ms"] for r in doc["reloads"]]
            stage = [r["stage_ms"] for r in doc["reloads"]]
            seen = sorted(g * 1e3 for r in results for g in r["gaps"])
            lost = sum(r["lost"] for r in results)
            wrong = sum(r["wrong"] for r in results)
            answered = sum(r["answered"] for r in results)
            print(f"{2 + n} handlers (largest blob {size} bytes), {len(doc['reloads'])} reloads "
                  f"under 8 clients: {answered} answered, {lost} lost, {wrong} wrong")
            print(f"  server gap ms: p50 {statistics.median(gaps):.3f}  max {max(gaps):.3f}  "
                  f"(hold p50 {statistics.median(holds):.3f}, swap p50 "
                  f"{statistics.median(swaps):.3f}: the new module's load "
                  f"{statistics.median(loads):.3f}, the old one's unload "
                  f"{statistics.median(unloads):.3f})")
            print(f"  SIGHUP to swapped ms: p50 {statistics.median(took):.1f}  max {max(took):.1f}"
                  f"  (staging p50 {statistics.median(stage):.1f})")
            if seen:
                print(f"  clients, last answer of one version to the first of the next, ms: p50 "
                      f"{statistics.median(seen):.3f}  max {seen[-1]:.3f}  ({len(seen)} changes)")
            sys.stdout.flush()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
