#!/usr/bin/python3
"""GPU tests of custom dispatch kernels and of a handler written for CUDA-Q realtime, through the
real tools: packed with cudaq-rt-pack (--dispatcher, --alias), linked at load and served by
cudaq-rt-run. Exits 77 (ctest: SKIPPED) where there is no GPU.

Environment (set by ctest): CUDAQ_RT_PACK, CUDAQ_RT_RUN, CUDAQ_RT_EXAMPLE_APP, CUDAQ_RT_BRIDGE_PATH
as for test_run.py; CUDAQ_RT_TIMED_DISPATCH and CUDAQ_RT_BLOCK_DISPATCH (the static libraries of
examples/dispatch/) and CUDAQ_RT_RPC_INCREMENT (examples/cudaq_compat/'s).
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_harness import EXAMPLE_APP, gpu_arch, main, pack_into  # noqa: E402
from test_run import RunCase  # noqa: E402

TIMED = os.environ.get("CUDAQ_RT_TIMED_DISPATCH", "libcudaq_rt_example_timed_dispatch.a")
BLOCK = os.environ.get("CUDAQ_RT_BLOCK_DISPATCH", "libcudaq_rt_example_block_dispatch.a")
RPC_INCREMENT = os.environ.get("CUDAQ_RT_RPC_INCREMENT", "libcudaq_rt_example_rpc_increment.a")


def fnv1a(name):
    h = 2166136261
    for c in name.encode():
        h = ((h ^ c) * 16777619) & 0xFFFFFFFF
    return h


class DispatchCase(RunCase):
    def calls(self, pkg, lines, *args):
        """The --json document of --calls with `lines` on stdin (every call must succeed)."""
        doc = self.run_json(pkg, *args, "--calls", "-", stdin="".join(l + "\n" for l in lines))
        for c in doc["calls"]:
            self.assertEqual(c["status"], 0, c)
        return doc


class TimedDispatchTest(DispatchCase):
    """examples/dispatch/timed_dispatch.cu: one thread, every handler call timed."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.pkg = pack_into(cls.tmp, "timed", EXAMPLE_APP, "--dispatcher", TIMED)

    def timings(self, result_hex):
        calls, total_ns, min_ns, max_ns, last_ns, cycles = struct.unpack(
            "<6Q", bytes.fromhex(result_hex))
        return dict(calls=calls, total_ns=total_ns, min_ns=min_ns, max_ns=max_ns, last_ns=last_ns,
                    cycles=cycles)

    def test_times_every_handler_call(self):
        sum_id = fnv1a("sum_i32")
        lines = ["sum_i32 i32:1,2,3 --result i64"] * 3 + ["echo hex:0102"] * 2 + [
            f"dispatch_timings u32:{sum_id}", "dispatch_timings"]
        doc = self.calls(self.pkg, lines, "--dispatcher", "timed_dispatch")
        self.assertEqual((doc["dispatcher"], doc["kernel"]), ("timed_dispatch", "timed_dispatch"))
        self.assertEqual([c["result"] for c in doc["calls"][:3]], ["6"] * 3)
        self.assertEqual(doc["calls"][3]["result_hex"], "0102")
        one = self.timings(doc["calls"][5]["result_hex"])
        every = self.timings(doc["calls"][6]["result_hex"])
        print(f"\nsum_i32: {one}\nall rows: {every}", file=sys.stderr)
        self.assertEqual(one["calls"], 3)
        # Every handler call before the report: 3 sum_i32, 2 echo, and the first report.
        self.assertEqual(every["calls"], 6)
        for t in (one, every):
            self.assertLessEqual(t["min_ns"], t["max_ns"])
            self.assertLessEqual(t["min_ns"] * t["calls"], t["total_ns"])
            self.assertLessEqual(t["total_ns"], t["max_ns"] * t["calls"])
            self.assertGreater(t["cycles"], 0)
            self.assertLess(t["max_ns"], 1_000_000)  # a handler call is microseconds, not ms
        self.assertEqual(doc["stats"], {"requests": 7, "ok": 7, "handler_errors": 0,
                                        "protocol_errors": 0})

    def test_unknown_row_is_a_handler_error(self):
        r = self.run_ok(self.pkg, "--dispatcher", "timed_dispatch", "--call", "dispatch_timings",
                        "--arg", "u32:12345", status=3)
        self.assertEqual(r.stdout, "handler error 1\n")

    def test_builtin_kernel_still_serves_the_package(self):
        # The same package under the unified kernel: the dispatcher's code is then not linked,
        # and its handler with it, so the link says what is missing.
        r, _ = self.run_tool(self.pkg, "--dispatcher", "builtin", "--call", "echo", "--arg",
                             "hex:01")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("dispatch_timings", r.stderr)


class BlockDispatchTest(DispatchCase):
    """examples/dispatch/block_dispatch.cu: each request handed to a whole block."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.pkg = pack_into(cls.tmp, "block", EXAMPLE_APP, "--dispatcher", BLOCK)

    def test_whole_block_runs_the_handler(self):
        values = list(range(1, 251))  # 1000 bytes: a whole slot's payload
        lines = ["block_threads", "block_sum_u32 u32:" + ",".join(map(str, values)) + " --result u64",
                 "block_sum_u32 u32:4294967295,4294967295 --result u64", "block_sum_u32 --result u64"]
        for threads in (256, 1024, 96):
            with self.subTest(threads=threads):
                doc = self.calls(self.pkg, lines, "--dispatcher", "block_dispatch", "--grid",
                                 f"1,{threads}")
                self.assertEqual(doc["kernel"], "block_dispatch")
                size, arrived = struct.unpack("<2I", bytes.fromhex(doc["calls"][0]["result_hex"]))
                self.assertEqual((size, arrived), (threads, threads))
                self.assertEqual([c["result"] for c in doc["calls"][1:]],
                                 [str(sum(values)), str(2 * 4294967295), "0"])
                self.assertEqual(doc["stats"]["ok"], 4)

    def test_refused_frames_are_answered_by_thread_0(self):
        r = self.run_ok(self.pkg, "--dispatcher", "block_dispatch", "--grid", "1,128", "--call",
                        "block_sum_u32", "--arg", "hex:010203", status=3)
        self.assertEqual(r.stdout, "handler error 1\n")

    def test_extra_blocks_return(self):
        doc = self.calls(self.pkg, ["block_threads"], "--dispatcher", "block_dispatch", "--grid",
                         "4,64")
        self.assertEqual(struct.unpack("<2I", bytes.fromhex(doc["calls"][0]["result_hex"])),
                         (64, 64))


class CudaqCompatTest(DispatchCase):
    """examples/cudaq_compat/rpc_increment.cu, exported with CUDA-Q's one-argument macro, called
    under the wire name CUDA-Q's tests use."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.pkg = pack_into(cls.tmp, "rpc", RPC_INCREMENT, "--alias",
                            "rpc_increment=rpc_increment_handler")

    def test_called_under_its_wire_name(self):
        self.assertEqual(self.call(self.pkg, "rpc_increment", "hex:00017f"), "ok: 010280\n")
        doc = self.run_json(self.pkg, "--call", "rpc_increment", "--arg", "hex:00017ffe")
        c, = doc["calls"]
        self.assertEqual((c["status"], c["result_hex"]), (0, "010280ff"))
        # The request carried FNV-1a("rpc_increment"), the id CUDA-Q's tests send.
        self.assertEqual(fnv1a("rpc_increment"), 0x191B6322)
        doc = self.run_json(self.pkg, "--call", "rpc_increment_handler", "--arg", "hex:41")
        self.assertEqual(doc["calls"][0]["result_hex"], "42")

    def test_list_shows_the_alias(self):
        r = self.run_ok(self.pkg, "--list")
        self.assertIn("aliases:\n  rpc_increment -> rpc_increment_handler  function_id 0x191b6322\n",
                      r.stdout)
        r = self.run_ok(self.pkg, "--list", "--json")
        self.assertEqual(json.loads(r.stdout)["aliases"],
                         [{"name": "rpc_increment", "handler": "rpc_increment_handler",
                           "function_id": 0x191B6322}])


if __name__ == "__main__":
    main(gpu_arch() is not None)
