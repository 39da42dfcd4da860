"""The Python package cudaq_rt on a GPU, in process: every example handler gives cudaq-rt-run's
answer; 100,000 calls with random payloads, none wrong, one by one and as a batch; the LUT global
set from numpy; a handler's error as HandlerError with its status; a faulting handler reported by
name with the process alive; several servers in one process; memory stable over 1,000,000 calls.

Environment (tests/CMakeLists.txt, scripts/gpu-tests.sh): CUDAQ_RT_PREFIX (the build tree or
bundle), CUDAQ_RT_PACK, CUDAQ_RT_LINK, CUDAQ_RT_RUN, CUDAQ_RT_EXAMPLE_APP, CUDAQ_RT_FAULT_APP,
CUDAQ_RT_LUT_TABLE, PYTHONPATH (python/)."""
from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from gpu_harness import (EXAMPLE_APP, FAULT_APP, RUN, ClassDirCase, gpu_arch, link_for, main,
                         pack_into)

import cudaq_rt

ARCH = gpu_arch()
LUT_TABLE = os.environ.get("CUDAQ_RT_LUT_TABLE", "")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PythonCase(ClassDirCase):  # type: ignore[misc]
    tmp: str
    package: str
    code: cudaq_rt.Code

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        os.environ["CUDAQ_RT_CACHE_DIR"] = os.path.join(cls.tmp, "cache")
        cls.package = pack_into(cls.tmp, "example", EXAMPLE_APP)
        link_for(cls.package, ARCH)
        cls.code = cudaq_rt.open_package(cls.package)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.code.close()
        super().tearDownClass()

    def cudaq_rt_run(self, handler: str, arg: bytes, *extra: str) -> bytes:
        r = subprocess.run([RUN, self.package, *extra, "--call", handler, "--arg",
                            "hex:" + arg.hex()], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        answer = r.stdout.strip()
        return bytes.fromhex(answer[len("ok: "):]) if answer.startswith("ok: ") else b""


class Handlers(PythonCase):
    def test_every_example_handler_answers_as_cudaq_rt_run(self) -> None:
        rng = random.Random(11)
        cases = [
            ("sum_i32", struct.pack("<4i", 1, 2, 3, -10)),
            ("sum_i32", struct.pack("<3i", 2**31 - 1, 2**31 - 1, -2**31)),
            ("axpy_f32", struct.pack("<5f", 2.5, 1.0, 2.0, 10.0, 20.0)),
            ("parity", bytes(rng.randrange(256) for _ in range(300))),
            ("echo", bytes(rng.randrange(256) for _ in range(1000))),
            ("echo", b""),
            ("lut_decode", bytes(range(64))),
        ]
        with cudaq_rt.Server(self.code, bridge="loopback") as s:
            for handler, arg in cases:
                with self.subTest(handler=handler, size=len(arg)):
                    self.assertEqual(s.call(handler, arg), self.cudaq_rt_run(handler, arg))

    def test_100000_random_calls_none_wrong(self) -> None:
        rng = random.Random(12)
        with cudaq_rt.Server(self.code, bridge="loopback") as s:
            wrong = 0
            for i in range(100_000):
                if i % 2:
                    arg = rng.randbytes(rng.randrange(0, 1001))
                    wrong += s.call("echo", arg) != arg
                else:
                    values = [rng.randrange(-2**31, 2**31) for _ in range(rng.randrange(0, 250))]
                    got = s.call("sum_i32", struct.pack(f"<{len(values)}i", *values))
                    wrong += struct.unpack("<q", got)[0] != sum(values)
            self.assertEqual(wrong, 0)
            args = [rng.randbytes(rng.randrange(0, 1001)) for _ in range(100_000)]
            batch = s.call_batch("echo", args, inflight=32)
            self.assertEqual(batch.failures, 0)
            self.assertEqual(sum(1 for a, b in zip(args, batch) if a != b), 0)
            stats = s.stats()
            self.assertEqual((stats.requests, stats.ok), (200_000, 200_000))

    def test_the_lut_global_set_from_numpy(self) -> None:
        try:
            import numpy as np
        except ImportError:
            self.skipTest("numpy is not installed for this Python")
        table = np.fromfile(LUT_TABLE, np.uint8)
        syndromes = np.random.default_rng(13).integers(0, 256, 512, dtype=np.uint8)
        with cudaq_rt.Server(self.code, bridge="loopback") as s:
            s.set_global("cudaq_rt_example_lut", table)
            got = s.call("lut_decode", syndromes, result=np.uint8)
            self.assertTrue(np.array_equal(got, table[syndromes]))
            self.assertEqual(s.call("lut_decode", bytes.fromhex("01020308")).hex(), "01040220")
            with self.assertRaises(cudaq_rt.ArgumentError):
                s.set_global("cudaq_rt_example_lut", table[:100])

    def test_a_handler_error_is_an_exception_with_its_status(self) -> None:
        with cudaq_rt.Server(self.code, bridge="loopback") as s:
            with self.assertRaises(cudaq_rt.HandlerError) as e:
                s.call("sum_i32", b"\x01\x02\x03")
            self.assertEqual((e.exception.status, e.exception.handler), (1, "sum_i32"))
            self.assertEqual(s.call_raw("sum_i32", b"\x01\x02\x03").status, 1)
            self.assertEqual(s.stats().handler_errors, 2)

    def test_several_servers_in_one_process(self) -> None:
        with cudaq_rt.Server(self.code, bridge="loopback") as a, \
                cudaq_rt.Server(self.code, bridge="loopback") as b:
            for i in range(1000):
                self.assertEqual(a.call("echo", b"a%d" % i), b"a%d" % i)
                self.assertEqual(b.call("echo", b"b%d" % i), b"b%d" % i)
            with cudaq_rt.Server(self.code, bridge="loopback") as c:
                self.assertEqual(c.call("echo", b"c"), b"c")
            self.assertEqual(a.call("echo", b"after"), b"after")
            self.assertEqual((a.stats().requests, b.stats().requests), (1001, 1000))

    def test_memory_is_stable_over_1000000_calls(self) -> None:
        with cudaq_rt.Server(self.code, bridge="loopback") as s:
            arg = bytes(64)
            for _ in range(100_000):
                s.call("echo", arg)
            before = rss_bytes()
            for _ in range(1_000_000):
                s.call("echo", arg)
            grown = rss_bytes() - before
            print(f"\nRSS after 100,000 calls {before / 2**20:.1f} MiB; 1,000,000 calls later "
                  f"{grown / 2**10:+.0f} KiB", file=sys.stderr)
            self.assertLess(grown, 2 * 2**20)


class Faults(ClassDirCase):  # type: ignore[misc]
    tmp: str

    def test_a_faulting_handler_is_named_and_the_process_lives(self) -> None:
        # The fault reaches the host when the GPU reports it: before the response (the call
        # raises; the kernel was serving the request) or, for a store that faults late, after the
        # response was published (the call answers; check() then raises, naming the request the
        # kernel answered last), as cudaq-rt-run reports it (tests/gpu/test_run.py).
        package = pack_into(self.tmp, "faults", FAULT_APP)
        link_for(package, ARCH)
        script = textwrap.dedent(f"""
            import time
            import cudaq_rt
            code = cudaq_rt.open_package({package!r})
            server = cudaq_rt.Server(code, bridge="loopback", stop_timeout=2).__enter__()
            print(server.call("ok"))
            try:
                print("answered", server.call("fault_illegal_address", timeout=10))
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    server.check()
                    time.sleep(0.01)
                print("no fault in 10 s")
            except cudaq_rt.FailedError as e:
                print("FailedError:", e)
            print("alive")
            """)
        env: dict[str, Any] = {**os.environ, "CUDAQ_RT_CACHE_DIR": os.path.join(self.tmp, "cache")}
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=120, env=env)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "b''", r.stdout + r.stderr)
        answered = lines[1] == "answered b''"
        error = lines[2] if answered else lines[1]
        self.assertTrue(error.startswith("FailedError: "), r.stdout + r.stderr)
        self.assertIn("CUDA_ERROR_ILLEGAL_ADDRESS", error)
        where = "after answering" if answered else "serving"
        self.assertIn(f", {where} request_id ", error)
        self.assertIn("(handler 'fault_illegal_address')", error)
        self.assertEqual(lines[-1], "alive")
        self.assertEqual(len(lines), 4 if answered else 3, r.stdout)

if __name__ == "__main__":
    main(ARCH is not None)
