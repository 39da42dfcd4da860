"""The Python package cudaq_rt on a machine without a GPU, through the real libcudaq_rt.so:
packages opened, verified and refused before any GPU work, with the C API's messages; the
driver's own "no GPU" error; and, on servers the C API makes on a fake GPU (fake_server.cpp)
with the echo bridge (a call's answer is its arguments), every conversion of arguments and
results, batches, benchmarks, handler statuses, timeouts, faults, several servers in one
process, the GIL released while a call waits, and handles freed.

Environment (tests/CMakeLists.txt): PYTHONPATH (python/), CUDAQ_RT_PREFIX (the build tree),
CUDAQ_RT_PACK, CUDAQ_RT_RUN, CUDAQ_RT_EXAMPLE_APP, CUDAQ_RT_LOOPBACK_BRIDGE,
CUDAQ_RT_FAKE_SERVER, CUDAQ_RT_ECHO_BRIDGE_DIR."""
from __future__ import annotations

import array
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import weakref
from pathlib import Path
from typing import Any

import numpy as np

import cudaq_rt
from cudaq_rt import server as server_module

ENV = os.environ
WORK = Path(tempfile.mkdtemp(prefix="cudaq_rt_python_"))
CACHE = WORK / "cache"
FAKE = ctypes.CDLL(ENV["CUDAQ_RT_FAKE_SERVER"])


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def pack(name: str, *extra: str) -> Path:
    """The example app, with the loopback bridge's device hooks packed as the echo bridge's."""
    r = run(ENV["CUDAQ_RT_PACK"], ENV["CUDAQ_RT_EXAMPLE_APP"], "--bridge", "echo",
            ENV["CUDAQ_RT_LOOPBACK_BRIDGE"], "-n", name, "-o", str(WORK), *extra)
    assert r.returncode == 0, r.stderr
    return WORK / f"{name}.cudaqpkg"


def ed25519_key(name: str) -> tuple[Path, Path]:
    private, public = WORK / f"{name}.pem", WORK / f"{name}.pub"
    for argv in (["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(private)],
                 ["openssl", "pkey", "-in", str(private), "-pubout", "-out", str(public)]):
        r = run(*argv)
        assert r.returncode == 0, r.stderr
    return private, public


def setUpModule() -> None:
    global PACKAGE, SIGNED, KEY, OTHER_KEY
    os.environ["CUDAQ_RT_BRIDGE_PATH"] = ENV["CUDAQ_RT_ECHO_BRIDGE_DIR"]
    os.environ.pop("CUDAQ_RT_TRUST", None)
    private, KEY = ed25519_key("ci")
    _, OTHER_KEY = ed25519_key("other")
    PACKAGE = pack("example", "--alias", "add_them=sum_i32")
    SIGNED = pack("signed", "--sign", str(private))
    server_module.set_server_factory(FAKE.cudaq_rt_test_fake_server_create)


def tearDownModule() -> None:
    shutil.rmtree(WORK, ignore_errors=True)


PACKAGE = KEY = OTHER_KEY = SIGNED = Path()


def fake_server(code: cudaq_rt.Code, bridge_config: str = "", **options: Any) -> cudaq_rt.Server:
    return cudaq_rt.Server(code, bridge_config=bridge_config, cache_dir=CACHE, stop_timeout=0.5,
                           **options)


class OpenPackage(unittest.TestCase):
    def test_handlers_and_aliases(self) -> None:
        with cudaq_rt.open_package(PACKAGE) as code:
            self.assertEqual(code.handlers,
                             ("axpy_f32", "echo", "lut_decode", "parity", "sum_i32", "add_them"))
            self.assertEqual(code.label, str(PACKAGE))
            self.assertFalse(code.has_dispatch_kernel("no_such"))
        self.assertTrue(code.closed)
        with self.assertRaises(cudaq_rt.StateError):
            code.pointer

    def test_no_such_package(self) -> None:
        with self.assertRaises(cudaq_rt.NotFoundError) as e:
            cudaq_rt.open_package(WORK / "nothing.cudaqpkg")
        self.assertEqual(str(e.exception), f"'{WORK / 'nothing.cudaqpkg'}': no such package")
        self.assertEqual(e.exception.code, 3)

    def test_a_flipped_byte_is_refused_at_the_open(self) -> None:
        tampered = WORK / "tampered.cudaqpkg"
        shutil.copytree(PACKAGE, tampered)
        blob = max((p for p in (tampered / "blobs").rglob("*") if p.is_file()),
                   key=lambda p: p.stat().st_size)
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 1
        blob.write_bytes(bytes(data))
        with self.assertRaises(cudaq_rt.FailedError) as e:
            cudaq_rt.open_package(tampered)
        self.assertIn(blob.name, str(e.exception))
        self.assertIn("digest", str(e.exception))

    def test_trust_refusals_carry_the_c_apis_message(self) -> None:
        with self.assertRaises(cudaq_rt.RefusedError) as unsigned:
            cudaq_rt.open_package(PACKAGE, trust=KEY)
        self.assertEqual(str(unsigned.exception),
                         f"'{PACKAGE}': not signed: no signature in signatures/ (cudaq-rt-pack or "
                         "cudaq-rt-link --sign KEY signs a package)")
        with self.assertRaises(cudaq_rt.RefusedError) as wrong:
            cudaq_rt.open_package(SIGNED, trust=[OTHER_KEY])
        self.assertIn("signed only by keys that are not trusted", str(wrong.exception))
        # The same refusal from the load, under the same keys: one message, whichever refuses.
        with cudaq_rt.open_package(SIGNED) as code:
            server = fake_server(code, trust=[OTHER_KEY])
            with self.assertRaises(cudaq_rt.RefusedError) as at_load:
                server.load()
            self.assertEqual(str(at_load.exception), str(wrong.exception))
            server.close()
        with cudaq_rt.open_package(SIGNED, trust=[OTHER_KEY, KEY]) as code:
            self.assertEqual(code.trust, f"{OTHER_KEY}:{KEY}")
        with self.assertRaises(cudaq_rt.RefusedError):
            cudaq_rt.open_package(SIGNED, trust=WORK / "no_such.pub")


class NoGpu(unittest.TestCase):
    def test_the_drivers_one_line_error(self) -> None:
        if Path("/dev/nvidia0").exists():
            self.skipTest("this machine has a GPU")
        server_module.set_server_factory(None)
        try:
            with cudaq_rt.open_package(PACKAGE) as code:
                with self.assertRaises(cudaq_rt.NoGpuError) as e:
                    with cudaq_rt.Server(code):
                        pass
        finally:
            server_module.set_server_factory(FAKE.cudaq_rt_test_fake_server_create)
        message = str(e.exception)
        self.assertNotIn("\n", message)
        self.assertEqual(e.exception.code, 5)
        r = run(ENV["CUDAQ_RT_RUN"], str(PACKAGE), "--call", "echo")
        self.assertEqual(r.returncode, 1)
        self.assertIn(message, r.stderr)
        # The README's example says the same, in one line, with exit status 1.
        quickstart = Path(__file__).resolve().parents[2] / "examples" / "python" / "quickstart.py"
        r = run(sys.executable, str(quickstart), str(PACKAGE))
        self.assertEqual((r.returncode, r.stdout, r.stderr),
                         (1, "", f"quickstart: error: {message}\n"))


class Calls(unittest.TestCase):
    code: cudaq_rt.Code
    server: cudaq_rt.Server

    @classmethod
    def setUpClass(cls) -> None:
        cls.code = cudaq_rt.open_package(PACKAGE)
        cls.server = fake_server(cls.code).__enter__()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.close()
        cls.code.close()

    def test_every_kind_of_buffer_round_trips(self) -> None:
        s = self.server
        self.assertEqual(s.slot_size, 1024)
        self.assertEqual(s.max_payload, 1000)
        ints = np.array([1, 2, 3, -10], np.int32)
        args: list[Any] = [b"\x01\x02\x03", bytearray(b"abc"), memoryview(b"xyzw")[1:3],
                           array.array("i", [7, -7]), ints, ints.reshape(2, 2), np.float64(2.5)]
        for arg in args:
            with self.subTest(type=type(arg).__name__):
                self.assertEqual(s.call("echo", arg), memoryview(arg).tobytes())
        self.assertEqual(s.call("echo"), b"")
        back = s.call("echo", ints, result=np.int32)
        self.assertEqual(back.dtype, np.int32)
        self.assertEqual(back.tolist(), [1, 2, 3, -10])
        out = bytearray(16)
        self.assertEqual(s.call("echo", b"in place", out=out), 8)
        self.assertEqual(out[:8], b"in place")
        self.assertEqual(s.call("add_them", b"\x05"), b"\x05")  # an alias, by its wire name
        self.assertEqual(s.call(cudaq_rt.function_id("echo"), b"by id"), b"by id")

    def test_what_cannot_be_passed_in_place_is_refused(self) -> None:
        s = self.server
        with self.assertRaises(cudaq_rt.ArgumentError) as e:
            s.call("echo", np.arange(8, dtype=np.int32)[::2])
        self.assertIn("not a contiguous buffer", str(e.exception))
        with self.assertRaises(cudaq_rt.ArgumentError):
            s.call("echo", "text")
        with self.assertRaises(cudaq_rt.ArgumentError):
            s.call("echo", b"abc", out=b"readonly")
        with self.assertRaises(cudaq_rt.ArgumentError) as small:
            s.call("echo", b"12345", out=bytearray(2))
        self.assertEqual(str(small.exception), f"'{PACKAGE}': the result is 5 bytes, more than "
                         "the 2 the caller has room for")
        with self.assertRaises(cudaq_rt.ArgumentError) as odd:
            s.call("echo", b"123", result=np.int16)
        self.assertIn("not a whole number of int16", str(odd.exception))
        with self.assertRaises(cudaq_rt.ArgumentError) as big:
            s.call("echo", bytes(1001))
        self.assertIn("1001 bytes of arguments, but the bridge's slots hold 1000",
                      str(big.exception))
        for fid in (-1, 1 << 32):
            with self.assertRaises(cudaq_rt.ArgumentError) as wide:
                s.call(fid, b"")
            self.assertEqual(str(wide.exception), f"'{PACKAGE}': function_id {fid} is not a "
                             "32-bit unsigned number")
        with self.assertRaises(cudaq_rt.NotFoundError) as missing:
            s.call("no_such", b"")
        self.assertEqual(str(missing.exception),
                         f"'{PACKAGE}': no handler 'no_such': the code exports axpy_f32, echo, "
                         "lut_decode, parity, sum_i32, add_them")

    def test_batches(self) -> None:
        s = self.server
        rows = np.arange(64 * 12, dtype=np.uint8).reshape(64, 12)
        batch = s.call_batch("echo", rows, result_size=12, inflight=3)
        self.assertEqual(len(batch), 64)
        self.assertEqual(batch.failures, 0)
        self.assertTrue(np.array_equal(batch.array(np.uint8), rows))
        self.assertEqual(batch[5], rows[5].tobytes())
        self.assertEqual(batch[-1], rows[-1].tobytes())
        ragged: list[Any] = [b"", b"a", b"bb" * 100, bytearray(b"ccc"), np.int64(9)]
        got = s.call_batch("echo", ragged)
        self.assertEqual(list(got), [memoryview(a).tobytes() for a in ragged])
        self.assertEqual(list(got.lengths), [0, 1, 200, 3, 8])
        with self.assertRaises(ValueError):
            got.array(np.uint8)  # rows of different lengths
        with self.assertRaises(cudaq_rt.ArgumentError) as e:
            s.call_batch("echo", np.zeros(8, np.uint8))
        self.assertIn("a batch is 2-D", str(e.exception))
        with self.assertRaises(cudaq_rt.ArgumentError) as e:
            s.call_batch("echo", [b"", bytes(1001)])
        self.assertIn("request 1: 1001 bytes of arguments, but the bridge's slots hold 1000",
                      str(e.exception))
        with self.assertRaises(cudaq_rt.FailedError) as failed:
            s.call_batch("echo", [b"12345"], result_size=4)
        self.assertIn("request 0's result is 5 bytes, more than the result_stride of 4",
                      str(failed.exception))
        self.assertEqual(s.call("echo", b"after"), b"after")  # the ring is in order again

    def test_bench(self) -> None:
        report = self.server.bench("echo", bytes(range(32)), requests=3000, inflight=4,
                                   warmup=100)
        self.assertEqual(report.requests, 3000)
        self.assertEqual(report.wrong, 0)
        self.assertGreater(report.requests_per_s, 0)
        self.assertTrue(0 < report.min_us <= report.p50_us <= report.p99_us <= report.max_us)
        self.assertIn("3000 requests", str(report))

    def test_frames_by_hand(self) -> None:
        from cudaq_rt_client import wire

        s = self.server
        self.assertTrue(s.send(wire.request(wire.function_id("echo"), b"raw", request_id=77)))
        frame = s.receive()
        assert frame is not None
        answer = wire.parse_response(frame)
        self.assertEqual((answer.request_id, answer.status, answer.result), (77, 0, b"raw"))
        self.assertIsNone(s.receive())

    def test_the_gil_is_released_while_a_call_waits(self) -> None:
        with fake_server(self.code, "silent") as silent:
            ticks = 0
            done = threading.Event()

            def count() -> None:
                nonlocal ticks
                while not done.is_set():
                    ticks += 1
                    time.sleep(0.001)

            counter = threading.Thread(target=count)
            counter.start()
            try:
                with self.assertRaises(cudaq_rt.CallTimeoutError):
                    silent.call("echo", b"x", timeout=0.3)
            finally:
                done.set()
                counter.join()
            self.assertGreater(ticks, 50)

    def test_globals_and_the_table(self) -> None:
        s = self.server
        with self.assertRaises(cudaq_rt.NotFoundError):
            s.set_global("cudaq_rt_no_such_global", np.zeros(4, np.uint8))
        with self.assertRaises(cudaq_rt.ArgumentError):
            s.set_global("cudaq_rt_example_lut", 42)
        self.assertNotEqual(s.lookup("sum_i32"), 0)
        self.assertEqual(s.lookup("add_them"), s.lookup("sum_i32"))
        with self.assertRaises(cudaq_rt.StateError):
            s.set_function(7, "sum_i32")  # not while running
        self.assertEqual(s.stats(), cudaq_rt.Stats(0, 0, 0, 0))  # the fake kernel counts nothing


class Statuses(unittest.TestCase):
    def test_a_handlers_status_a_timeout_and_a_fault(self) -> None:
        with cudaq_rt.open_package(PACKAGE) as code:
            with fake_server(code, "status=3") as s:
                with self.assertRaises(cudaq_rt.HandlerError) as e:
                    s.call("sum_i32", b"\x01\x00\x00\x00")
                self.assertEqual((e.exception.status, e.exception.handler, e.exception.result),
                                 (3, "sum_i32", b"\x01\x00\x00\x00"))
                self.assertNotIsInstance(e.exception, cudaq_rt.ProtocolError)
                self.assertEqual(s.call_raw("echo", b"ab"), cudaq_rt.Answer(3, b"ab"))
                batch = s.call_batch("echo", [b"a", b"b"])
                self.assertEqual(list(batch.statuses), [3, 3])
                self.assertEqual(batch.failures, 2)
                with self.assertRaises(cudaq_rt.HandlerError):
                    batch.raise_for_status()
                self.assertEqual(s.bench("echo", b"1234", requests=50, warmup=0).wrong, 50)
            with fake_server(code, "silent") as s:
                with self.assertRaises(cudaq_rt.CallTimeoutError) as t:
                    s.call("echo", b"x", timeout=0.1)
                self.assertIsInstance(t.exception, TimeoutError)
                self.assertEqual(str(t.exception), f"'{PACKAGE}': sm_90: no response within 0.1 s")
                with self.assertRaises(cudaq_rt.CallTimeoutError):
                    s.call_batch("echo", [b"x"], timeout=0.1)
            with fake_server(code) as s:
                FAKE.cudaq_rt_test_fake_gpu_faults(1)
                try:
                    with self.assertRaises(cudaq_rt.FailedError) as f:
                        s.check()
                    self.assertIn("the dispatch kernel cudaq_rt_unified_dispatch failed: "
                                  "CUDA_ERROR_ILLEGAL_ADDRESS", str(f.exception))
                finally:
                    FAKE.cudaq_rt_test_fake_gpu_faults(0)


class Lifetimes(unittest.TestCase):
    def test_several_servers_pause_each_other_around_loads(self) -> None:
        launches = FAKE.cudaq_rt_test_fake_gpu_launches
        with cudaq_rt.open_package(PACKAGE) as code:
            first = fake_server(code).__enter__()
            before = launches()
            second = fake_server(code).__enter__()
            # The second's start stopped the first between two requests and started it again.
            self.assertEqual(launches() - before, 2)
            self.assertEqual(first.call("echo", b"1"), b"1")
            self.assertEqual(second.call("echo", b"2"), b"2")
            second.close()
            self.assertEqual(launches() - before, 3)  # its close paused the first too
            self.assertTrue(first.running)
            self.assertEqual(first.call("echo", b"still"), b"still")
            first.close()

    def test_a_faulted_server_does_not_stop_another_from_starting(self) -> None:
        with cudaq_rt.open_package(PACKAGE) as code:
            first = fake_server(code).__enter__()
            FAKE.cudaq_rt_test_fake_gpu_faults(1)
            try:
                second = fake_server(code)
                second.start()  # pausing the first finds it ended by its fault, and goes on
            finally:
                FAKE.cudaq_rt_test_fake_gpu_faults(0)
            self.assertFalse(first.running)
            self.assertTrue(second.running)
            self.assertEqual(second.call("echo", b"served"), b"served")
            second.close()
            first.close()

    def test_closed_means_closed_and_the_code_outlives_its_servers(self) -> None:
        code = cudaq_rt.open_package(PACKAGE)
        s = fake_server(code).__enter__()
        code.close()  # the server keeps its code until it is closed
        self.assertEqual(s.call("echo", b"ok"), b"ok")
        s.close()
        s.close()
        self.assertTrue(s.closed)
        with self.assertRaises(cudaq_rt.StateError):
            s.call("echo", b"x")

    def test_the_call_path_is_the_one_asked_for_and_ends_with_the_server(self) -> None:
        # Server.call goes through cudaq_rt._fastcall where the build made it, unless
        # CUDAQ_RT_FASTCALL=0 (ctest runs this file both ways); a Caller a thread still holds
        # answers None once its server is stopped or freed, so that thread's call takes the
        # general path and is refused there.
        want_fast = ENV.get("CUDAQ_RT_FASTCALL", "1") != "0"
        built = any(p.is_file() for p in cudaq_rt._library.fastcall_candidates())
        self.assertEqual(built, ENV.get("CUDAQ_RT_EXPECT_FASTCALL") == "1")
        fid = cudaq_rt.function_id("echo")
        with cudaq_rt.open_package(PACKAGE) as code:
            s = fake_server(code).__enter__()
            held = s._handle.fast
            self.assertEqual(held is not None, want_fast and built)
            if held is None:
                s.close()
                return
            self.assertEqual(held.call(fid, b"fast", 1.0), b"fast")
            out = bytearray(8)
            self.assertEqual(held.call_into(fid, b"in", out, 1.0), 2)
            self.assertEqual(held.call(fid, "not a buffer", 1.0), None)  # the general path's
            # While it runs, the server's own `call` is the Caller's, with the method's arguments.
            self.assertEqual(vars(s).get("call"), held.server_call)
            self.assertEqual(s.call(handler="echo", arg=b"kw", timeout=2), b"kw")
            self.assertEqual(s.call(fid), b"")
            with self.assertRaises(TypeError) as extra:
                s.call("echo", b"x", b"y")  # type: ignore[call-overload]
            self.assertIn("takes 2 positional arguments (handler, arg) but 3", str(extra.exception))
            with self.assertRaises(TypeError) as unknown:
                s.call("echo", b"x", size=3)  # type: ignore[call-overload]
            self.assertIn("unexpected keyword argument 'size'", str(unknown.exception))
            with self.assertRaises(TypeError) as twice:
                s.call("echo", b"x", arg=b"y")  # type: ignore[call-overload]
            self.assertIn("multiple values for argument 'arg'", str(twice.exception))
            with self.assertRaises(TypeError):
                s.call(arg=b"x")  # type: ignore[call-overload]
            self.assertEqual(cudaq_rt.Server.call(s, "echo", b"ctypes"), b"ctypes")  # the method
            s.stop()
            self.assertNotIn("call", vars(s))
            self.assertIsNone(held.call(fid, b"x", 1.0))
            with self.assertRaises(cudaq_rt.StateError):
                s.call("echo", b"x")
            with self.assertRaises(cudaq_rt.StateError):
                held.server_call("echo", b"x")  # a stand-in taken before the stop
            s.start()
            again = s._handle.fast
            assert again is not None
            self.assertIsNot(again, held)
            self.assertEqual(s.call("echo", b"restarted"), b"restarted")
            s.close()
            self.assertIsNone(again.call(fid, b"x", 1.0))
            with self.assertRaises(cudaq_rt.StateError):
                s.call("echo", b"x")
            # A running server dropped without close is freed (its stand-in does not hold it),
            # and a stand-in taken from it then says the server is gone.
            dropped = fake_server(code).__enter__()
            stand_in = dropped.call
            gone = weakref.ref(dropped)
            del dropped
            self.assertIsNone(gone())
            with self.assertRaises(cudaq_rt.StateError):
                stand_in("echo", b"x")

    def test_reload_of_the_same_code_swaps_nothing(self) -> None:
        with cudaq_rt.open_package(PACKAGE) as code, fake_server(code) as s:
            report = s.reload(code)
            self.assertFalse(report.swapped)
            self.assertGreaterEqual(report.stage_ms, 0)

    def test_handles_are_freed(self) -> None:
        fds = len(os.listdir("/proc/self/fd"))
        with cudaq_rt.open_package(PACKAGE) as code:
            for _ in range(50):
                with fake_server(code) as s:
                    s.call("echo", b"x")
            for _ in range(20):
                cudaq_rt.open_package(PACKAGE)  # dropped without close: the finalizer frees it
        self.assertLessEqual(len(os.listdir("/proc/self/fd")), fds)

    def test_servers_left_open_are_freed_at_exit(self) -> None:
        script = (
            "import ctypes, os, cudaq_rt\n"
            "from cudaq_rt import server\n"
            "server.set_server_factory(ctypes.CDLL(os.environ['CUDAQ_RT_FAKE_SERVER'])"
            ".cudaq_rt_test_fake_server_create)\n"
            f"code = cudaq_rt.open_package({str(PACKAGE)!r})\n"
            f"a = cudaq_rt.Server(code, cache_dir={str(CACHE)!r}).__enter__()\n"
            f"b = cudaq_rt.Server(code, cache_dir={str(CACHE)!r}).__enter__()\n"
            "print(a.call('echo', b'a') + b.call('echo', b'b'))\n")
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=120, check=False)
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "b'ab'\n", ""))


class Library(unittest.TestCase):
    def test_found_where_the_prefix_says(self) -> None:
        self.assertEqual(Path(cudaq_rt.library_path()).parent,
                         Path(ENV["CUDAQ_RT_PREFIX"]) / "lib")
        r = subprocess.run([sys.executable, "-c", "import cudaq_rt; cudaq_rt.open_self()"],
                           env={**ENV, "CUDAQ_RT_PREFIX": str(WORK / "nowhere")},
                           capture_output=True, text=True, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("cudaq_rt._library.LibraryNotFoundError: "
                      f"$CUDAQ_RT_PREFIX={WORK / 'nowhere'}: no libcudaq_rt.so.0 there", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
