"""Serves the example package on GPU 0 and calls its handlers from Python, in process: one call,
a global set from numpy, a batch of 10,000 calls checked against numpy, and a benchmark.

    PYTHONPATH=python python3 examples/python/quickstart.py build/example/example.cudaqpkg

(the package scripts/run-example.sh packs and links). Exit status 0 ok, 1 an error, said in one
line: no GPU, a package that does not verify, a wrong answer."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import cudaq_rt

EXAMPLES = Path(__file__).resolve().parents[1]


def main(package: str) -> None:
    code = cudaq_rt.open_package(package)  # every blob verified; no GPU work yet
    with cudaq_rt.Server(code, bridge="loopback") as server:
        total = server.call("sum_i32", np.array([1, 2, 3, -10], np.int32), result=np.int64)
        print("sum_i32(1, 2, 3, -10) =", int(total[0]))

        table = np.fromfile(EXAMPLES / "lut" / "syndrome_table.bin", np.uint8)
        server.set_global("cudaq_rt_example_lut", table)
        print("lut_decode(01020308) =", server.call("lut_decode", bytes.fromhex("01020308")).hex())

        rows = np.random.default_rng(7).integers(-1000, 1000, size=(10_000, 4), dtype=np.int32)
        sums = server.call_batch("sum_i32", rows, result_size=8).array(np.int64)[:, 0]
        if not np.array_equal(sums, rows.sum(axis=1)):
            raise SystemExit("quickstart: error: a batch answer differs from numpy's sum")
        print(f"{len(rows)} batched sum_i32 calls: every answer numpy's")

        print("echo, 64 bytes, 32 in flight:", server.bench("echo", bytes(64), requests=100_000,
                                                          inflight=32))
        print(server.stats())


if __name__ == "__main__":
    try:
        main(sys.argv[1] if len(sys.argv) > 1 else "build/example/example.cudaqpkg")
    except cudaq_rt.Error as e:
        raise SystemExit(f"quickstart: error: {e}") from None
