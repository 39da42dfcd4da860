#!/usr/bin/env python3
"""A Python call's round trip next to the C API's and cudaq-rt-run --bench's, on one GPU, in one
run, with the mapped-memory floor beside them when given. Prints a table; asserts nothing.

    python_call.py BUILD [--floor FLOOR_BINARY] [--calls N] [--gaps US,US,...]

BUILD: a build tree or a bundle (scripts/gpu-bundle.sh); the package is the example app, packed
and linked for the GPU here, with a fresh CUDA_CACHE_PATH and link cache. Rows:
  python call        Server.call("echo", 16 bytes), each timed in Python (perf_counter_ns)
  python call, out=  the same, the result written into a bytearray of the caller's
  python call, ctypes  the first row through ctypes alone, as without cudaq_rt._fastcall
  python bench       Server.bench: the C loop of cudaq-rt-run --bench, driven from Python
  C cudaq_rt_call    bench/python/capi_call_rtt.c, each call timed in C
  C, GAP us between  the same with the host spinning GAP us between one call's return and the
                     next call (--gaps): a C caller with a Python call's cadence, whose work
                     between two round trips decides where a request meets the GPU's probe
  cudaq-rt-run       cudaq-rt-run --bench, its own process
  batch, 32 in flight  Server.call_batch of N requests, against cudaq_rt_bench at 32 in flight"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2] / "python"))


def percentile(sorted_us: list[float], p: float) -> float:
    rank = max(1, -(-int(p * len(sorted_us)) // 100))
    return sorted_us[min(rank, len(sorted_us)) - 1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("build", type=Path)
    ap.add_argument("--floor", type=Path)
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--gaps", default="0.25,0.5,0.75,1,1.5",
                    help="rows of C calls with this many us between them ('' for none)")
    a = ap.parse_args()
    build = a.build.resolve()
    os.environ["CUDAQ_RT_PREFIX"] = str(build)
    tmp = Path(tempfile.mkdtemp(prefix="python_call."))
    os.environ["CUDA_CACHE_PATH"] = str(tmp / "cuda-cache")
    os.environ["CUDAQ_RT_CACHE_DIR"] = str(tmp / "link-cache")
    os.environ["CUDAQ_RT_BRIDGE_PATH"] = str(build / "lib" / "cudaq-rt" / "bridges")
    import cudaq_rt

    subprocess.run([build / "bin" / "cudaq-rt-pack", build / "examples" / "cudaq_rt_example_app",
                    "-n", "example", "-o", tmp], check=True, capture_output=True)
    package = tmp / "example.cudaqpkg"
    n = a.calls
    payload = bytes(16)
    rows: list[tuple[str, str]] = []

    code = cudaq_rt.open_package(package)
    with cudaq_rt.Server(code, bridge="loopback") as server:
        for _ in range(1000):
            server.call("echo", payload)
        into = bytearray(64)
        fast = server._handle.fast
        ctypes_call = cudaq_rt.Server.call  # the method itself: the ctypes path
        for label in ("python call", "python call, out=", "python call, ctypes"):
            us: list[float] = []
            clock = time.perf_counter_ns
            if label == "python call, ctypes":  # as without cudaq_rt._fastcall
                if fast is None:
                    continue
                for _ in range(n):
                    t0 = clock()
                    ctypes_call(server, "echo", payload)
                    us.append((clock() - t0) / 1000)
            elif label == "python call":
                for _ in range(n):
                    t0 = clock()
                    server.call("echo", payload)
                    us.append((clock() - t0) / 1000)
            else:
                for _ in range(n):
                    t0 = clock()
                    server.call("echo", payload, out=into)
                    us.append((clock() - t0) / 1000)
            us.sort()
            rows.append((label, f"p50 {percentile(us, 50):.2f}  p90 {percentile(us, 90):.2f}  "
                                f"p99 {percentile(us, 99):.2f}  mean {sum(us) / n:.2f}"))
        r = server.bench("echo", payload, requests=n, inflight=1)
        rows.append(("python bench", f"p50 {r.p50_us:.2f}  p90 {r.p90_us:.2f}  "
                                     f"p99 {r.p99_us:.2f}  mean {r.mean_us:.2f}"))
        args = bytes(n * 16)
        start = time.perf_counter()
        batch = server.call_batch("echo", [args[i * 16:(i + 1) * 16] for i in range(n)],
                                  result_size=16, inflight=32)
        list_s = time.perf_counter() - start
        arr = memoryview(bytearray(args)).cast("B", (n, 16))
        start = time.perf_counter()
        batch = server.call_batch("echo", arr, result_size=16, inflight=32)
        rows_s = time.perf_counter() - start
        assert batch.failures == 0
        c32 = server.bench("echo", payload, requests=n, inflight=32)
        rows.append(("batch, 32 in flight", f"2-D buffer {n / rows_s / 1e6:.3f} M/s, list of bytes "
                                            f"{n / list_s / 1e6:.3f} M/s; cudaq_rt_bench "
                                            f"{c32.requests_per_s / 1e6:.3f} M/s"))
    code.close()

    for gap in ["0"] + [g for g in a.gaps.split(",") if g]:
        out = subprocess.run([build / "bench" / "capi_call_rtt", package, "echo", "16", str(n),
                              gap], check=True, capture_output=True, text=True).stdout
        c = json.loads(out)
        rows.append(("C cudaq_rt_call" + ("" if gap == "0" else f", {gap} us between"),
                     f"p50 {c['p50_us']:.2f}  p90 {c['p90_us']:.2f}  p99 {c['p99_us']:.2f}  "
                     f"mean {c['mean_us']:.2f}"))
    out = subprocess.run([build / "bin" / "cudaq-rt-run", package, "--bench", str(n), "--call",
                          "echo", "--arg", "hex:" + payload.hex()], check=True,
                         capture_output=True, text=True).stdout
    rows.append(("cudaq-rt-run --bench", " ".join(out.split())))
    if a.floor:
        out = subprocess.run([a.floor], check=True, capture_output=True, text=True).stdout
        rows.append(("floor.cu", " ".join(out.split())[:160]))
    width = max(len(label) for label, _ in rows)
    for label, text in rows:
        print(f"{label:<{width}}  {text}")
    if re.search(r"wrong [1-9]", " ".join(t for _, t in rows)):
        print("note: wrong answers above", file=sys.stderr)


if __name__ == "__main__":
    main()
