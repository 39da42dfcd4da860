#!/usr/bin/python3
"""Integration tests of cudaq-rt-run that need no GPU: usage errors, refused before anything is
loaded, and the one-line failure where the machine has no CUDA driver. The package is the example
application packed by the real cudaq-rt-pack (no link: nothing here gets as far as a cubin).
What needs a GPU is in tests/gpu/test_run.py.

Environment (set by ctest): CUDAQ_RT_PACK, CUDAQ_RT_RUN (the tools), CUDAQ_RT_EXAMPLE_APP (the
example application's binary).
"""
import ctypes
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from harness import EXAMPLE_APP, PACK, RUN

TOOL = "cudaq-rt-run"
USAGE_HINT = "Run 'cudaq-rt-run --help' for usage."
NO_DRIVER = ("cudaq-rt-run: error: no CUDA driver on this machine: libcuda.so.1: cannot open "
             "shared object file: No such file or directory")


def has_cuda_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


class RunWithoutGpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cudaq-rt-run-test.")
        r = subprocess.run([PACK, EXAMPLE_APP, "--name", "example", "-o", cls.tmp],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"cudaq-rt-pack failed ({r.returncode}):\n{r.stderr}")
        cls.pkg = os.path.join(cls.tmp, "example.cudaqpkg")
        cls.calls = os.path.join(cls.tmp, "calls.txt")
        with open(cls.calls, "w") as f:
            f.write("echo hex:00\n")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_tool(self, *args, stdin=""):
        env = dict(os.environ)
        # A cache of the test's own: nothing here may link, but nothing may touch the user's.
        env["CUDAQ_RT_CACHE_DIR"] = os.path.join(self.tmp, "cache")
        return subprocess.run([RUN, *args], input=stdin, capture_output=True, text=True, env=env,
                              timeout=60)

    # A usage error: exit status 2, nothing on stdout, and on stderr exactly the error line and
    # the hint. `message` is the whole error text when `exact`, else its start.
    def usage_error(self, args, message, exact=True):
        r = self.run_tool(*args)
        self.assertEqual(r.returncode, 2, f"{args}\n{r.stdout}{r.stderr}")
        self.assertEqual(r.stdout, "", args)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 2, f"{args}\n{r.stderr}")
        if exact:
            self.assertEqual(lines[0], f"{TOOL}: error: {message}", args)
        else:
            self.assertTrue(lines[0].startswith(f"{TOOL}: error: {message}"), lines[0])
        self.assertEqual(lines[1], USAGE_HINT)

    # --- usage: refused before the GPU is touched, so the same on any machine ------------------

    def test_nothing_to_do(self):
        self.usage_error([self.pkg],
                         "nothing to do: give --call NAME, --calls FILE, --bench N, --serve or "
                         "--list")

    def test_no_package(self):
        self.usage_error(["--call", "echo"], "package is required")

    def test_arg_without_call(self):
        for what in (["--list"], ["--bench", "5"], ["--calls", self.calls]):
            with self.subTest(what=what):
                self.usage_error([self.pkg, *what, "--arg", "i32:1"], "--arg needs --call")

    def test_exclusive_modes(self):
        self.usage_error([self.pkg, "--call", "echo", "--calls", self.calls],
                         "--call excludes --calls")
        self.usage_error([self.pkg, "--call", "echo", "--list"], "--call excludes --list")
        self.usage_error([self.pkg, "--bench", "5", "--list"], "--bench excludes --list")

    def test_serve_usage(self):
        for args, message in (
                (["--serve", "--call", "echo"], "--call excludes --serve"),
                (["--serve", "--bench", "5"], "--bench excludes --serve"),
                (["--serve", "--list"], "--serve excludes --list"),
                (["--count", "5", "--call", "echo"], "--count needs --serve"),
                (["--duration", "1", "--bench", "5"], "--duration needs --serve"),
                (["--stats-interval", "1", "--list"], "--stats-interval needs --serve"),
                (["--serve", "--count", "0"], "--count: must be at least 1"),
                (["--serve", "--duration", "0"], "--duration: must be more than 0 seconds"),
                (["--serve", "--stats-interval", "-1"],
                 "--stats-interval: must be more than 0 seconds")):
            with self.subTest(args=args):
                self.usage_error([self.pkg, *args], message)

    def test_device_lists(self):
        for device in ("x", "-1", "+1", "0,", ",1", "0,,1", "1.5", "99999999999"):
            with self.subTest(device=device):
                self.usage_error([self.pkg, "--serve", "--device", device],
                                 f"--device: '{device}' is not a GPU ordinal, a comma-separated "
                                 "list of them, or 'all'")
        self.usage_error([self.pkg, "--serve", "--device", "0,1,0"],
                         "--device: GPU 0 is listed twice")
        self.usage_error([self.pkg, "--call", "echo", "--device", "0,1"],
                         "--device 0,1: several GPUs need --serve")
        self.usage_error([self.pkg, "--bench", "5", "--device", "all"],
                         "--device all: several GPUs need --serve")

    def test_unknown_option(self):
        self.usage_error([self.pkg, "--call", "echo", "--bogus"],
                         "The following argument was not expected: --bogus")

    def test_bad_result_type(self):
        self.usage_error([self.pkg, "--call", "echo", "--result", "i128"],
                         "--result: unknown result type 'i128' (expected i8, i16, i32, i64, u8, "
                         "u16, u32, u64, f32, f64, hex, str or raw)")

    def test_result_raw_refused_with_json_and_calls(self):
        message = "--result raw writes bytes to stdout: not with --json or --calls"
        self.usage_error([self.pkg, "--calls", self.calls, "--result", "raw"], message)
        # With --json the refusal is a document on stdout too, as link's and the client's are.
        r = self.run_tool(self.pkg, "--call", "echo", "--result", "raw", "--json")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stderr.splitlines()[0], f"{TOOL}: error: {message}")
        self.assertEqual(json.loads(r.stdout), {"error": message, "exit_status": 2,
                                                "format_version": 1, "package": self.pkg})

    def test_json_usage_error_is_a_document(self):
        # A line CLI11 refuses, and one the session refuses: a document either way.
        r = self.run_tool(self.pkg, "--json", "--bogus")
        self.assertEqual(r.returncode, 2, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["error"], "The following argument was not expected: --bogus")
        self.assertEqual(doc["exit_status"], 2)
        r = self.run_tool(self.pkg, "--json")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(json.loads(r.stdout)["error"], "nothing to do: give --call NAME, "
                         "--calls FILE, --bench N, --serve or --list")

    # --- what needs no GPU is checked before one is asked ------------------------------------

    def test_unknown_handler_before_the_gpu(self):
        r = self.run_tool(self.pkg, "--call", "no_such", "--arg", "i32:1")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr, f"{TOOL}: error: '{self.pkg}': no handler 'no_such': the "
                         "package exports axpy_f32, echo, lut_decode, parity, sum_i32\n")
        r = self.run_tool(self.pkg, "--bench", "10", "--call", "no_such", "--json")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("no handler 'no_such'", json.loads(r.stdout)["error"])

    def test_missing_calls_file_before_the_gpu(self):
        missing = os.path.join(self.tmp, "no-such-calls.txt")
        r = self.run_tool(self.pkg, "--calls", missing)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stderr, f"{TOOL}: error: '{missing}': cannot open: No such file or "
                         "directory\n")

    def test_list_without_a_gpu_lists_the_package(self):
        if has_cuda_driver():
            self.skipTest("this machine has a CUDA driver (libcuda.so.1 loads)")
        r = self.run_tool(self.pkg, "--list")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("  sum_i32  function_id 0xa431fb55\n", r.stdout)
        self.assertTrue(r.stdout.endswith(
            "no GPU here (" + NO_DRIVER.removeprefix(f"{TOOL}: error: ") + "): --arch "
            "sm_XX[,sm_YY...] says what a GPU of each arch would load\n"), r.stdout)
        r = self.run_tool(self.pkg, "--list", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["targets"], [])
        self.assertNotIn("arch", doc)
        self.assertIn("no CUDA driver", doc["no_gpu"])

    def test_list_for_several_archs(self):
        r = self.run_tool(self.pkg, "--list", "--arch", "sm_80,sm_90", "--arch", "sm_80",
                          "--no-link")
        self.assertEqual(r.returncode, 1, r.stderr)  # nothing is linked: neither can load
        targets = re.findall(r"(?m)^(sm_\d+) \(no GPU asked\): cannot load: ", r.stdout)
        self.assertEqual(targets, ["sm_80", "sm_90"], r.stdout)
        r = self.run_tool(self.pkg, "--list", "--arch", "sm_80,sm_90", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual([t["arch"] for t in doc["targets"]], ["sm_80", "sm_90"])
        self.assertEqual([t["source"] for t in doc["targets"]], ["link at load"] * 2)
        self.assertEqual(doc["arch"], "sm_80")  # the first target's, as a one-arch document
        self.usage_error([self.pkg, "--list", "--arch", "compute_80"],
                         "--arch: unknown arch 'compute_80': a virtual arch (PTX) is not a link "
                         "target; for that GPU, give sm_80")

    def test_bad_grid(self):
        for grid in ("1", "0,1", "1,0", "1,2,3", "a,b", "1,2x"):
            with self.subTest(grid=grid):
                self.usage_error([self.pkg, "--call", "echo", "--grid", grid],
                                 f"--grid: '{grid}' is not BLOCKS,THREADS (two positive numbers)")

    # A sign is refused: "-1" must not wrap to 4294967295 blocks.
    def test_negative_grid(self):
        for grid in ("-1,2", "1,-2", "+1,2", ""):
            with self.subTest(grid=grid):
                self.usage_error([self.pkg, "--call", "echo", "--grid", grid],
                                 f"--grid: '{grid}' is not BLOCKS,THREADS (two positive numbers)")

    def test_bad_counts_and_timeouts(self):
        for args, message in (
                (["--bench", "0"], "--bench: the number of requests must be at least 1"),
                (["--bench", "5", "--inflight", "0"], "--inflight: must be at least 1"),
                (["--call", "echo", "--timeout", "0"], "--timeout: must be more than 0 seconds"),
                (["--call", "echo", "--stop-timeout", "-1"],
                 "--stop-timeout: must be 0 seconds or more")):
            with self.subTest(args=args):
                self.usage_error([self.pkg, *args], message)

    def test_bad_arg_specs(self):
        cases = [
            ("i8:300", "300 is out of range for i8 (-128..127)"),
            ("i8:0xff", "0xff is out of range for i8 (-128..127)"),
            ("u8:-1", "-1 is out of range for u8 (0..255)"),
            ("i32:1,,2", "element 2 is empty"),
            ("i32:", "no i32 value"),
            ("i32:x", "'x' is not an integer (decimal or 0x hex)"),
            ("f32:1e39", "1e39 is out of range for f32"),
            ("hex:abc", "odd number of hex digits (3)"),
            ("hex:0g", "'g' at offset 1 is not a hex digit"),
            ("nosuch:1", "unknown type 'nosuch' (expected i8, i16, i32, i64, u8, u16, u32, u64, "
                         "f32, f64, hex, str or @FILE)"),
            ("1234", "expected TYPE:VALUE or @FILE"),
            ("@", "no file name after '@'"),
            ("@" + os.path.join(self.tmp, "nosuch.bin"),
             f"cannot open '{os.path.join(self.tmp, 'nosuch.bin')}': No such file or directory"),
            ("@" + self.tmp, f"'{self.tmp}' is not a regular file"),
        ]
        for spec, message in cases:
            with self.subTest(spec=spec):
                self.usage_error([self.pkg, "--call", "echo", "--arg", "i32:1", "--arg", spec],
                                 f"argument '{spec}': {message}")

    def test_bad_globals(self):
        cases = [
            ("cudaq_rt_example_lut", "expected NAME=TYPE:VALUE or NAME=@FILE"),
            ("1lut=u8:1", "'1lut' is not a C identifier"),
            ("=u8:1", "'' is not a C identifier"),
            ("lut=u8:256", "256 is out of range for u8 (0..255)"),
            ("lut=hex:0", "odd number of hex digits (1)"),
        ]
        for text, message in cases:
            with self.subTest(text=text):
                self.usage_error([self.pkg, "--global", text, "--call", "echo"],
                                 f"global '{text}': {message}")

    def test_version(self):
        r = self.run_tool("--version")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"^cudaq-rt-run \d+\.\d+\.\d+ \(source \S+, CUDA \d+\.\d+\.\d+, "
                                   r"nvJitLink \d+\.\d+ \(/\S*libnvJitLink\.so\.\d+\)\)\n$")

    def test_nvjitlink_that_is_not_one(self):
        # A path that is no nvJitLink library is a usage error, named, before anything loads.
        for path, why in (("/nonexistent/libnvJitLink.so.13", "cannot load nvJitLink: "),
                          ("/etc/hostname", "cannot load nvJitLink: ")):
            with self.subTest(path=path):
                self.usage_error([self.pkg, "--list", "--arch", "sm_90", "--nvjitlink", path],
                                 f"--nvjitlink: '{path}': {why}", exact=False)

    # --- no CUDA driver: every mode that needs the GPU fails in one line --------------------------

    def no_driver(self, args, stdin=""):
        if has_cuda_driver():
            self.skipTest("this machine has a CUDA driver (libcuda.so.1 loads)")
        r = self.run_tool(*args, stdin=stdin)
        self.assertEqual(r.returncode, 1, f"{args}\n{r.stdout}{r.stderr}")
        self.assertEqual(r.stdout, "", args)
        self.assertEqual(r.stderr, NO_DRIVER + "\n", args)

    def test_no_driver_call(self):
        self.no_driver([self.pkg, "--call", "sum_i32", "--arg", "i32:1,2,3", "--result", "i64"])

    def test_no_driver_bench(self):
        self.no_driver([self.pkg, "--bench", "10", "--inflight", "4"])


    def test_no_driver_calls_file(self):
        self.no_driver([self.pkg, "--calls", self.calls])

    def test_no_driver_serve(self):
        self.no_driver([self.pkg, "--serve"])
        self.no_driver([self.pkg, "--serve", "--device", "all"])

    def test_no_driver_calls_stdin(self):
        self.no_driver([self.pkg, "--calls", "-"], stdin="echo hex:01\nparity hex:0703\n")

    def test_the_toolkits_stub_libcuda_is_no_driver(self):
        # NVIDIA's stubs/libcuda.so (for linking) first on the loader's path: every call answers
        # CUDA_ERROR_STUB_LIBRARY. It was reported as a driver too old for this build.
        cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
        stub = next((p for p in (os.path.join(cuda, d, "stubs", "libcuda.so")
                                 for d in ("lib64", "lib", "targets/x86_64-linux/lib"))
                     if os.path.exists(p)), None)
        self.assertIsNotNone(stub, f"no stubs/libcuda.so under {cuda}")
        lib = os.path.join(self.tmp, "stub-driver")
        os.makedirs(lib, exist_ok=True)
        link = os.path.join(lib, "libcuda.so.1")
        if not os.path.lexists(link):
            os.symlink(stub, link)
        env = dict(os.environ, LD_LIBRARY_PATH=lib, CUDAQ_RT_CACHE_DIR=os.path.join(self.tmp, "c"))
        r = subprocess.run([RUN, self.pkg, "--call", "echo"], capture_output=True, text=True,
                           env=env, timeout=60)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stderr, f"cudaq-rt-run: error: no CUDA driver on this machine: '{link}' "
                                   "is the CUDA Toolkit's stub library (for linking only), not a "
                                   "driver\n")


if __name__ == "__main__":
    unittest.main(verbosity=2)
