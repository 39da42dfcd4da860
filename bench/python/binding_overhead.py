#!/usr/bin/env python3
"""What the Python binding adds to the C API, measured on the CPU alone: a server made on the
tests' fake GPU (tests/python/fake_server.cpp) with the echo bridge, which answers on the host, so
that no GPU time is in any figure and what is left is software. Prints medians; asserts nothing.

    binding_overhead.py BUILD [--calls N]

Rows: cudaq_rt_call timed in C; Server.call (bytes) and call(out=) through cudaq_rt._fastcall
(where the build has it) and through ctypes alone, call_raw, each timed in Python;
ctypes' own call of cudaq_rt_call with argtypes, and the prepared one the package uses
(Api.call_prepared); then a batch of N rows against cudaq_rt_bench's rate at 4 in flight. On a GPU the same comparison is bench/python/python_call.py."""
from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))


def median_us(fn: Callable[[], object], n: int) -> float:
    for _ in range(n // 10):
        fn()
    clock = time.perf_counter_ns
    us = []
    for _ in range(n):
        t0 = clock()
        fn()
        us.append((clock() - t0) / 1000)
    us.sort()
    return us[n // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("build", type=Path)
    ap.add_argument("--calls", type=int, default=200_000)
    a = ap.parse_args()
    build = a.build.resolve()
    os.environ["CUDAQ_RT_PREFIX"] = str(build)
    os.environ["CUDAQ_RT_BRIDGE_PATH"] = str(build / "tests" / "echo_bridge")
    import cudaq_rt
    from cudaq_rt import server as server_module

    fake = ctypes.CDLL(str(build / "tests" / "libcudaq_rt_test_fake_server.so"))
    fake.cudaq_rt_test_time_calls.restype = ctypes.c_double
    fake.cudaq_rt_test_time_calls.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32,
                                              ctypes.c_size_t]
    server_module.set_server_factory(fake.cudaq_rt_test_fake_server_create)
    tmp = Path(tempfile.mkdtemp(prefix="binding_overhead."))
    subprocess.run([build / "bin" / "cudaq-rt-pack", build / "examples" / "cudaq_rt_example_app",
                    "--bridge", "echo", build / "lib" / "cudaq-rt" / "bridges" /
                    "libcudaq_rt_bridge_loopback.so", "-n", "example", "-o", tmp],
                   check=True, capture_output=True)
    n = a.calls
    payload = bytes(16)
    fid = cudaq_rt.function_id("echo")
    with cudaq_rt.open_package(tmp / "example.cudaqpkg") as code, \
            cudaq_rt.Server(code, cache_dir=tmp / "cache") as s:
        rows = [("cudaq_rt_call, timed in C", fake.cudaq_rt_test_time_calls(s.pointer, fid, 16, n))]
        into = bytearray(64)
        # Server.call as the package makes it (a running server's own `call`: cudaq_rt._fastcall's
        # stand-in where it was built), then the method itself, cudaq_rt.Server.call: ctypes alone.
        ctypes_call = cudaq_rt.Server.call
        if s._handle.fast is not None:
            rows.append(("Server.call(echo, 16 bytes), fastcall",
                         median_us(lambda: s.call("echo", payload), n)))
            rows.append(("Server.call(..., out=bytearray), fastcall",
                         median_us(lambda: s.call("echo", payload, out=into), n)))
        rows.append(("Server.call(echo, 16 bytes), ctypes",
                     median_us(lambda: ctypes_call(s, "echo", payload), n)))
        rows.append(("Server.call(..., out=bytearray), ctypes",
                     median_us(lambda: ctypes_call(s, "echo", payload, out=into), n)))
        rows.append(("Server.call_raw", median_us(lambda: s.call_raw("echo", payload), n)))
        api = cudaq_rt._capi.api()
        length, status = ctypes.c_uint32(), ctypes.c_int32()
        result = ctypes.create_string_buffer(1024)
        args = (s.pointer, fid, payload, 16, ctypes.addressof(result), 1024, ctypes.byref(length),
                ctypes.byref(status), 5.0)
        rows.append(("ctypes, cudaq_rt_call with argtypes", median_us(lambda: api.call(*args), n)))
        prepared = (ctypes.c_void_p(s.pointer), ctypes.c_uint32(fid), payload, 16,
                    ctypes.c_void_p(ctypes.addressof(result)), 1024, ctypes.byref(length),
                    ctypes.byref(status), ctypes.c_double(5.0))
        rows.append(("ctypes, the prepared call alone",
                     median_us(lambda: api.call_prepared(*prepared), n)))
        for label, us in rows:
            print(f"{label:<40} p50 {us:6.3f} us")
        batch_rows = memoryview(bytearray(16 * n)).cast("B", (n, 16))
        t0 = time.perf_counter()
        s.call_batch("echo", batch_rows, result_size=16, inflight=4)
        batch_rate = n / (time.perf_counter() - t0)
        bench = s.bench("echo", payload, requests=n, inflight=4, expect_echo=False)
        print(f"{'call_batch, 4 in flight':<40} {batch_rate / 1e6:6.2f} M/s; cudaq_rt_bench "
              f"{bench.requests_per_s / 1e6:.2f} M/s")


if __name__ == "__main__":
    main()
