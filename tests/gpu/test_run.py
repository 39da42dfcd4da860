#!/usr/bin/python3
"""GPU tests of cudaq-rt-run: the real tool loads packages that cudaq-rt-pack made from the example
and fault applications, launches the persistent dispatch kernel and serves requests through the
loopback bridge. Exits 77 (ctest: SKIPPED) at once where there is no GPU.

Environment (set by ctest): CUDAQ_RT_PACK, CUDAQ_RT_LINK, CUDAQ_RT_RUN (the tools),
CUDAQ_RT_EXAMPLE_APP, CUDAQ_RT_FAULT_APP (the applications' binaries), CUDAQ_RT_LUT_TABLE
(examples/lut/syndrome_table.bin), CUDAQ_RT_BRIDGE_PATH (the loopback bridge's directory).
Each test class has a directory and a link cache (CUDAQ_RT_CACHE_DIR) of its own.
"""
import hashlib
import json
import os
import random
import shutil
import struct
import subprocess
import tempfile
import time

from gpu_harness import (EXAMPLE_APP, FAULT_APP, RUN, ClassDirCase, assert_document, gpu_arch,
                         link_for, main, pack_into)

HERE = os.path.dirname(os.path.abspath(__file__))
LUT_TABLE = os.environ.get("CUDAQ_RT_LUT_TABLE",
                           os.path.join(HERE, "../../examples/lut/syndrome_table.bin"))

KERNEL = "cudaq_rt_unified_dispatch"
ROOM = 1000  # the loopback bridge's default slot (1024 bytes) less the 24-byte header

ARCH = gpu_arch() if __name__ == "__main__" else None


def sha256_file(path):
    with open(path, "rb") as f:
        return "sha256:" + hashlib.sha256(f.read()).hexdigest()


def cache_entries(cache):
    """The entries of a link cache (its v1/stats counters left out)."""
    out = []
    for dirpath, _, files in os.walk(cache):
        out += [os.path.relpath(os.path.join(dirpath, f), cache) for f in files]
    return sorted(f for f in out if f != os.path.join("v1", "stats"))


def module_entries(cache):
    """The entries of a link cache that hold modules: per-TU units (metadata mode "object")
    left out. An entry's metadata is JSON at offset 128, its length a u64 at 48."""
    out = []
    for name in cache_entries(cache):
        with open(os.path.join(cache, name), "rb") as f:
            entry = f.read()
        size, = struct.unpack_from("<Q", entry, 48)
        if json.loads(entry[128:128 + size]).get("mode") != "object":
            out.append(name)
    return out


def f32(v):
    """v rounded to float32."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


class RunCase(ClassDirCase):
    """A directory and a link cache per test class; helpers to run the tools in them. A subclass
    that sets `dispatcher` runs every test of its base with that dispatch kernel, and `grid`, its
    launch shape."""

    dir_prefix = "cudaq-rt-run-gpu"
    dispatcher = None
    grid = None
    kernel = KERNEL

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.cache = os.path.join(cls.tmp, "cache")

    @classmethod
    def env(cls, cache=None):
        e = dict(os.environ)
        for k in ("CUDAQ_RT_CACHE_DISABLE", "CUDAQ_RT_CACHE_MAXSIZE", "CUDA_MODULE_LOADING"):
            e.pop(k, None)
        e["CUDAQ_RT_CACHE_DIR"] = cache or cls.cache
        return e

    @classmethod
    def pack(cls, app, name, outdir=None):
        return pack_into(outdir or cls.tmp, name, app)

    @classmethod
    def link_ahead(cls, pkg, cache=None):
        link_for(pkg, ARCH, *cls.dispatcher_args(), env=cls.env(cache))

    @classmethod
    def dispatcher_args(cls):
        return ["--dispatcher", cls.dispatcher] if cls.dispatcher else []

    def run_tool(self, pkg, *args, stdin=None, cache=None, timeout=60):
        """(CompletedProcess, seconds) of one cudaq-rt-run."""
        t0 = time.monotonic()
        shape = ["--grid", self.grid] if self.grid else []
        r = subprocess.run([RUN, pkg, *self.dispatcher_args(), *shape, *args], input=stdin,
                           capture_output=True, text=True, env=self.env(cache), timeout=timeout)
        return r, time.monotonic() - t0

    def run_ok(self, pkg, *args, status=0, **kw):
        r, _ = self.run_tool(pkg, *args, **kw)
        self.assertEqual(r.returncode, status, f"{args}\n{r.stdout}{r.stderr}")
        return r

    def run_json(self, pkg, *args, status=0, **kw):
        r = self.run_ok(pkg, "--json", *args, status=status, **kw)
        doc = json.loads(r.stdout)
        assert_document(self, doc)
        self.assertEqual(doc["exit_status"], status)
        return doc

    def call(self, pkg, handler, *args, result=None, **kw):
        """stdout of `--call handler --arg ...` that must exit 0."""
        cmd = ["--call", handler]
        for a in args:
            cmd += ["--arg", a]
        if result:
            cmd += ["--result", result]
        return self.run_ok(pkg, *cmd, **kw).stdout

    def manifest(self, pkg):
        with open(os.path.join(pkg, "manifest.json")) as f:
            return json.load(f)

    def handlers(self, pkg):
        return [e["name"] for e in self.manifest(pkg)["exports"] if e["kind"] == "handler"]

    # One `cudaq-rt-run: error: ` line on stderr that holds every keyword; nothing on stdout.
    def assert_one_error(self, r, *keywords):
        self.assertEqual(r.stdout, "")
        errors = [l for l in r.stderr.splitlines() if l.startswith("cudaq-rt-run: error: ")]
        self.assertEqual(len(errors), 1, r.stderr)
        for k in keywords:
            self.assertIn(k, errors[0])
        return errors[0]


class HandlersTest(RunCase):
    """Every example handler through --call and --calls, on a package linked ahead of time."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.pkg = cls.pack(EXAMPLE_APP, "example")
        cls.link_ahead(cls.pkg)
        with open(LUT_TABLE, "rb") as f:
            cls.table = f.read()
        assert len(cls.table) == 256, len(cls.table)

    def write(self, name, data):
        path = os.path.join(self.tmp, name)
        with open(path, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        return path

    def test_sum_i32(self):
        values = [1, 2, 3, -10, 2147483647, 2147483647, -2147483648]
        spec = "i32:" + ",".join(map(str, values))
        self.assertEqual(self.call(self.pkg, "sum_i32", spec, result="i64"), f"ok: {sum(values)}\n")
        self.assertEqual(self.call(self.pkg, "sum_i32", spec),
                         "ok: " + struct.pack("<q", sum(values)).hex() + "\n")
        self.assertEqual(self.call(self.pkg, "sum_i32", "i32:1,2,3", result="i64"), "ok: 6\n")
        self.assertEqual(self.call(self.pkg, "sum_i32", "hex:", result="i64"), "ok: 0\n")

    def test_sum_i32_handler_error(self):
        # 3 bytes are not a whole number of int32: status 1, no result (an empty result prints the
        # status name alone), exit status 3.
        r = self.run_ok(self.pkg, "--call", "sum_i32", "--arg", "hex:010203", status=3)
        self.assertEqual(r.stdout, "handler error 1\n")
        self.assertEqual(r.stderr, "")
        doc = self.run_json(self.pkg, "--call", "sum_i32", "--arg", "hex:010203", status=3)
        c, = doc["calls"]
        self.assertEqual((c["handler"], c["request_id"], c["status"], c["status_name"],
                          c["result_hex"]), ("sum_i32", 1, 1, "handler error", ""))
        self.assertEqual(doc["stats"], {"requests": 1, "ok": 0, "handler_errors": 1,
                                        "protocol_errors": 0})

    def test_axpy_f32(self):
        self.assertEqual(self.call(self.pkg, "axpy_f32", "f32:2", "f32:1,2", "f32:10,20",
                                   result="f32"), "ok: 12,24\n")
        a, x, y = 2.5, [1.0, 2.0, -3.5, 0.125], [10.0, 20.0, 0.25, 100.0]
        expected = [f32(a * xi + yi) for xi, yi in zip(x, y)]  # all exact in float32
        out = self.call(self.pkg, "axpy_f32", f"f32:{a}", "f32:" + ",".join(map(str, x)),
                        "f32:" + ",".join(map(str, y)))
        self.assertEqual(out, "ok: " + struct.pack("<4f", *expected).hex() + "\n")
        out = self.call(self.pkg, "axpy_f32", f"f32:{a}", "f32:" + ",".join(map(str, x)),
                        "f32:" + ",".join(map(str, y)), result="f32")
        self.assertEqual(out, "ok: 12.5,25,-8.5,100.3125\n")
        # A length that is not a + n x + n y: status 1.
        r = self.run_ok(self.pkg, "--call", "axpy_f32", "--arg", "f32:1,2", status=3)
        self.assertEqual(r.stdout, "handler error 1\n")

    def test_parity(self):
        self.assertEqual(self.call(self.pkg, "parity", "hex:0703"), "ok: 010005000000\n")
        data = bytes(random.Random(7).randrange(256) for _ in range(ROOM - 4))
        expected = bytes(bin(b).count("1") & 1 for b in data) + struct.pack(
            "<I", sum(bin(b).count("1") for b in data))
        self.assertEqual(self.call(self.pkg, "parity", "hex:" + data.hex()),
                         "ok: " + expected.hex() + "\n")

    def test_echo(self):
        self.assertEqual(self.call(self.pkg, "echo", "str:hello world", result="str"),
                         "ok: hello world\n")
        self.assertEqual(self.call(self.pkg, "echo", "hex:5c00410aff", result="str"),
                         "ok: \\\\\\x00A\\x0a\\xff\n")
        self.assertEqual(self.call(self.pkg, "echo", "u16:1,65535", "i8:-1", "f64:0.5"),
                         "ok: " + (struct.pack("<HHb", 1, 65535, -1) +
                                   struct.pack("<d", 0.5)).hex() + "\n")
        # A full slot from a file.
        data = bytes(random.Random(8).randrange(256) for _ in range(ROOM))
        path = self.write("full.bin", data)
        self.assertEqual(self.call(self.pkg, "echo", "@" + path), "ok: " + data.hex() + "\n")
        self.assertEqual(self.call(self.pkg, "echo"), "ok\n")

    def test_lut_decode_without_table(self):
        # The global's initial value is the identity table: the input comes back unchanged.
        data = bytes(range(256))
        self.assertEqual(self.call(self.pkg, "lut_decode", "hex:01020308"), "ok: 01020308\n")
        self.assertEqual(self.call(self.pkg, "lut_decode", "hex:" + data.hex()),
                         "ok: " + data.hex() + "\n")

    def test_lut_decode_with_table(self):
        glob = ["--global", "cudaq_rt_example_lut=@" + LUT_TABLE]
        out = self.run_ok(self.pkg, *glob, "--call", "lut_decode", "--arg", "hex:01020308").stdout
        self.assertEqual(out, "ok: 01040220\n")
        syndromes = bytes(random.Random(9).randrange(256) for _ in range(512))
        out = self.run_ok(self.pkg, *glob, "--call", "lut_decode", "--arg",
                          "hex:" + syndromes.hex()).stdout
        self.assertEqual(out, "ok: " + bytes(self.table[s] for s in syndromes).hex() + "\n")
        # A table given as typed values works the same: every entry 0x5a.
        out = self.run_ok(self.pkg, "--global", "cudaq_rt_example_lut=u8:" + ",".join(["90"] * 256),
                          "--call", "lut_decode", "--arg", "hex:00ff7f").stdout
        self.assertEqual(out, "ok: 5a5a5a\n")

    def test_calls_file(self):
        path = self.write("calls.txt", "\n".join([
            "# name  arguments  result",
            "echo 'str:hello world' --result str",
            "sum_i32 i32:1,2,3 --result i64",
            "",
            "parity hex:0703   # the man page's example",
            "sum_i32 hex:010203",
            'echo "str:a \\"quoted\\" word" --result str',
            "lut_decode hex:01020308",
        ]) + "\n")
        r = self.run_ok(self.pkg, "--calls", path, "--result", "hex", status=3)
        self.assertEqual(r.stdout.splitlines(), [
            "ok: hello world",
            "ok: 6",
            "ok: 010005000000",
            "handler error 1",
            'ok: a "quoted" word',
            "ok: 01020308",
        ])
        self.assertEqual(r.stderr, "")
        # --json: one answer a request, its request_id the line number.
        doc = self.run_json(self.pkg, "--calls", path, status=3)
        self.assertEqual([(c["handler"], c["request_id"], c["status"]) for c in doc["calls"]],
                         [("echo", 2, 0), ("sum_i32", 3, 0), ("parity", 5, 0), ("sum_i32", 6, 1),
                          ("echo", 7, 0), ("lut_decode", 8, 0)])
        self.assertEqual(doc["calls"][1]["result"], "6")
        self.assertEqual(doc["stats"], {"requests": 6, "ok": 5, "handler_errors": 1,
                                        "protocol_errors": 0})

    def test_calls_file_bad_line(self):
        # A line that cannot be parsed is reported, answered with an error line and skipped; the
        # lines after it are still sent; usage (2) is worse than a handler error (3).
        path = self.write("bad.txt", "echo hex:01\necho i8:300\nsum_i32 hex:0102\necho hex:02\n")
        r = self.run_ok(self.pkg, "--calls", path, status=2)
        self.assertEqual(r.stdout.splitlines(),
                         ["ok: 01", "error: line 2", "handler error 1", "ok: 02"])
        self.assertEqual(r.stderr.splitlines(), [
            f"cudaq-rt-run: error: '{path}': line 2: argument 'i8:300': 300 is out of range for "
            "i8 (-128..127)"])

    def test_calls_stdin(self):
        lines = "".join(f"sum_i32 i32:{i},{i * i} --result i64\n" for i in range(1, 21))
        r = self.run_ok(self.pkg, "--calls", "-", stdin="echo hex:c0ffee\n" + lines)
        self.assertEqual(r.stdout.splitlines(),
                         ["ok: c0ffee"] + [f"ok: {i + i * i}" for i in range(1, 21)])

    def test_json_document(self):
        doc = self.run_json(self.pkg, "--call", "sum_i32", "--arg", "i32:40,2", "--result", "i64")
        self.assertEqual(doc["device"]["ordinal"], 0)
        self.assertEqual(doc["device"]["arch"], ARCH)
        self.assertTrue(doc["device"]["name"])
        self.assertRegex(doc["device"]["driver"], r"^\d+\.\d+$")
        link = next(l for l in self.manifest(self.pkg)["links"] if l["arch"] == ARCH)
        self.assertEqual(doc["cubin"]["source"], "package")
        self.assertEqual(doc["cubin"]["arch"], ARCH)
        self.assertEqual(doc["cubin"]["digest"], link["cubin"]["digest"])
        self.assertEqual(doc["cubin"]["size"], link["cubin"]["size"])
        self.assertEqual(doc["kernel"], self.kernel)
        self.assertEqual((doc["slot_size"], doc["slots"]), (1024, 64))
        times = doc["times"]
        for k in ("context_ms", "open_ms", "cubin_ms", "load_ms", "launch_ms",
                  "first_response_ms"):
            self.assertGreaterEqual(times[k], 0, k)
        c, = doc["calls"]
        self.assertEqual((c["handler"], c["request_id"], c["status"], c["status_name"],
                          c["result_hex"], c["result"]),
                         ("sum_i32", 1, 0, "ok", struct.pack("<q", 42).hex(), "42"))
        self.assertGreater(c["latency_us"], 0)
        self.assertEqual(doc["stats"], {"requests": 1, "ok": 1, "handler_errors": 0,
                                        "protocol_errors": 0})
        self.assertNotIn("error", doc)

    def test_bench_100000_none_lost(self):
        doc = self.run_json(self.pkg, "--bench", "100000", "--inflight", "32", timeout=120)
        b = doc["bench"]
        self.assertEqual((b["handler"], b["payload_bytes"], b["inflight"]), ("echo", 8, 32))
        self.assertEqual(b["requests"], 100000)
        self.assertEqual(b["wrong"], 0)
        s = doc["stats"]
        # Every request answered ok by the kernel; besides the 100,000 measured, the tool sends up
        # to 1,000 unmeasured warm-up requests first.
        self.assertEqual(s["ok"], s["requests"])
        self.assertGreaterEqual(s["requests"], 100000)
        self.assertLessEqual(s["requests"], 101000)
        self.assertEqual((s["handler_errors"], s["protocol_errors"]), (0, 0))
        lat = b["latency_us"]
        order = [lat[k] for k in ("min", "p50", "p90", "p99", "p99.9", "max")]
        self.assertEqual(order, sorted(order), lat)
        self.assertGreater(lat["min"], 0)
        self.assertGreater(b["requests_per_s"], 0)

    def test_unknown_handler_refused(self):
        names = ", ".join(self.handlers(self.pkg))
        message = (f"cudaq-rt-run: error: '{self.pkg}': no handler 'nosuch': the package exports "
                   f"{names}")
        r = self.run_ok(self.pkg, "--call", "nosuch", status=2)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr.splitlines(), [message])
        # Refused from the package's manifest before any GPU is asked: the error document, no
        # session (nothing was loaded, nothing sent).
        doc = self.run_json(self.pkg, "--call", "nosuch", "--arg", "hex:01", status=2)
        self.assertEqual(doc["error"], message[len("cudaq-rt-run: error: "):])
        self.assertEqual(doc["exit_status"], 2)
        self.assertNotIn("stats", doc)

    def test_oversize_argument_refused(self):
        data = bytes(ROOM + 1)
        message = (f"cudaq-rt-run: error: '{self.pkg}': the arguments of 'echo' are {ROOM + 1} "
                   f"bytes, but the bridge's slots hold {ROOM} (slot_size 1024 less the 24-byte "
                   "header)")
        r = self.run_ok(self.pkg, "--call", "echo", "--arg", "hex:" + data.hex(), status=2)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr.splitlines(), [message])
        doc = self.run_json(self.pkg, "--call", "echo", "--arg", "hex:" + data.hex(), status=2)
        self.assertEqual(doc["stats"]["requests"], 0, "a refused request was sent")
        # The bound is the bridge's: with larger slots the same argument goes through.
        out = self.run_ok(self.pkg, "--bridge-arg", "slot_size=2048", "--call", "echo", "--arg",
                          "hex:" + data.hex()).stdout
        self.assertEqual(out, "ok: " + data.hex() + "\n")

    def test_global_unknown_name(self):
        r, _ = self.run_tool(self.pkg, "--global", "nosuch_table=u8:1", "--call", "echo")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assert_one_error(r, f"{self.pkg}: {ARCH}: no __device__ global 'nosuch_table'",
                              "CUDAQ_RT_EXPORT_GLOBAL")

    def test_global_wrong_size(self):
        r, _ = self.run_tool(self.pkg, "--global", "cudaq_rt_example_lut=u8:1,2,3,4",
                             "--call", "lut_decode", "--arg", "hex:01")
        self.assertEqual(r.returncode, 1, r.stderr)
        line = self.assert_one_error(r)
        self.assertEqual(line, f"cudaq-rt-run: error: {self.pkg}: {ARCH}: global "
                               "'cudaq_rt_example_lut' is 256 bytes, but 4 bytes were given")


class LoadPathTest(RunCase):
    """Where the cubin comes from: the package, the cache, or a link at load."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.base = cls.pack(EXAMPLE_APP, "example", os.path.join(cls.tmp, "base"))

    def fresh(self):
        """A copy of the freshly packed package and an empty cache, in a directory of its own."""
        d = tempfile.mkdtemp(dir=self.tmp, prefix="t.")
        return (shutil.copytree(self.base, os.path.join(d, "example.cudaqpkg")),
                os.path.join(d, "cache"))

    def listed(self, pkg, *args, cache, status=0):
        r = self.run_ok(pkg, "--list", "--json", *args, cache=cache, status=status)
        doc = json.loads(r.stdout)
        assert_document(self, doc)
        self.assertEqual(doc["device"]["arch"], ARCH)
        self.assertEqual(doc["loadable"], status == 0)
        return doc

    def echo_from(self, pkg, *args, cache):
        """The --json document of an echo call, which must answer right."""
        doc = self.run_json(pkg, *args, "--call", "echo", "--arg", "hex:2a17", cache=cache)
        c, = doc["calls"]
        self.assertEqual((c["status"], c["result_hex"]), (0, "2a17"))
        self.assertEqual(doc["cubin"]["arch"], ARCH)
        return doc

    def test_link_at_load_then_cache_then_store_then_package(self):
        pkg, cache = self.fresh()
        self.assertEqual(self.manifest(pkg)["links"], [])
        self.assertEqual(self.listed(pkg, cache=cache)["source"], "link at load")
        first = self.echo_from(pkg, cache=cache)
        self.assertEqual(first["cubin"]["source"], "link at load")
        self.assertGreater(first["cubin"]["link_ms"], 0)
        self.assertEqual(self.manifest(pkg)["links"], [], "a link at load without --store "
                                                           "changed the package")
        self.assertEqual(len(module_entries(cache)), 1, "a link at load is one module in the cache")

        # Again: the cache has it, the same cubin.
        self.assertEqual(self.listed(pkg, cache=cache)["source"], "cache")
        again = self.echo_from(pkg, cache=cache)
        self.assertEqual(again["cubin"]["source"], "cache")
        self.assertEqual(again["cubin"]["digest"], first["cubin"]["digest"])
        self.assertEqual(self.manifest(pkg)["links"], [])

        # --store: --no-cache makes it link at load again (the cache is neither read nor written),
        # and the cubin goes into the package with its link record.
        stored = self.echo_from(pkg, "--no-cache", "--store", cache=cache)
        self.assertEqual(stored["cubin"]["source"], "link at load")
        links = self.manifest(pkg)["links"]
        self.assertEqual([(l["arch"], l["bridge"], l["dispatcher"]) for l in links],
                         [(ARCH, "loopback", "builtin")])
        record = links[0]["cubin"]
        self.assertEqual(record["digest"], stored["cubin"]["digest"])
        # Stored as one zstd frame under the frame's digest; the start below from the package's
        # record decompresses it and checks the cubin's digest.
        (form,) = [s for s in self.manifest(pkg)["stored"] if s["digest"] == record["digest"]]
        blob = os.path.join(pkg, "blobs", "sha256", form["stored_digest"][len("sha256:"):])
        self.assertEqual(sha256_file(blob), form["stored_digest"])
        self.assertEqual(os.path.getsize(blob), form["stored_size"])
        self.assertLess(form["stored_size"], record["size"])
        if shutil.which("zstd"):
            cubin = subprocess.run(["zstd", "-dc", blob], check=True, stdout=subprocess.PIPE).stdout
            self.assertEqual("sha256:" + hashlib.sha256(cubin).hexdigest(), record["digest"])

        # Now the package's own record wins over the cache.
        listed = self.listed(pkg, cache=cache)
        self.assertEqual(listed["source"], "package")
        self.assertEqual([(l["arch"], l["cubin"]) for l in listed["links"]],
                         [(ARCH, record["digest"])])
        last = self.echo_from(pkg, cache=cache)
        self.assertEqual(last["cubin"]["source"], "package")
        self.assertEqual(last["cubin"]["digest"], record["digest"])

    def test_from_a_registry_on_a_gpu(self):
        # A registry on the GPU: a package pushed to a registry (Debian's docker-registry, started
        # here) is started as oci://...: the first start fetches the config and this arch's
        # cubin into the store under the cache directory (not the code it was linked from), a
        # second the manifest only, --offline nothing; each answers right, from the package's
        # own record for this arch. A package with no cubin: the code is fetched for a link at
        # load, and the next start takes the cache's. Times are printed beside the package's.
        import sys
        sys.path.insert(0, os.path.join(HERE, "../integration"))
        from registry import Registry, registry_available
        if not registry_available():
            self.skipTest("no docker-registry (set DOCKER_REGISTRY)")
        from harness import stored_forms  # needs jsonschema, as the registry's tests do
        pkg, cache = self.fresh()
        with Registry(tmp=os.path.join(self.tmp, "registry")) as reg:
            ref = f"oci://{reg.url}/example:1"
            subprocess.run([os.environ["CUDAQ_RT_LINK"], pkg, "--arch", ARCH, "--push", ref],
                           check=True, capture_output=True, env=self.env(cache))
            times = {}
            t0 = time.monotonic()
            local = self.echo_from(pkg, cache=cache)
            times["package directory"] = time.monotonic() - t0
            self.assertEqual(local["cubin"]["source"], "package")
            store_cache = os.path.join(self.tmp, "store-cache")
            for label, extra in (("oci:// cold (empty store)", ()), ("oci:// warm", ()),
                                 ("oci:// --offline", ("--offline",))):
                mark = len(reg.requests())
                t0 = time.monotonic()
                doc = self.echo_from(ref, *extra, cache=store_cache)
                times[label] = time.monotonic() - t0
                got = [q for q in reg.requests(since=mark)]
                self.assertEqual(doc["cubin"]["source"], "package")
                self.assertEqual(doc["cubin"]["digest"], local["cubin"]["digest"])
                blobs = [q for q in got if "/blobs/" in q.path]
                if label.endswith("cold (empty store)"):
                    # The config and this arch's cubin: not the code it was linked from.
                    # (A blob stored compressed travels as its frame, named by the frame's
                    # digest: the manifest's `stored`.)
                    with open(os.path.join(pkg, "manifest.json"), "rb") as f:
                        text = f.read()
                    config = "sha256:" + hashlib.sha256(text).hexdigest()
                    d = doc["cubin"]["digest"]
                    cubin = stored_forms(pkg).get(d, (d,))[0]
                    self.assertEqual(sorted(q.path.rsplit("/", 1)[1] for q in blobs),
                                     sorted([config, cubin]))
                else:
                    self.assertEqual(blobs, [])
                    self.assertEqual(len(got), 0 if extra else 1)
            # A package with no cubin for this GPU and no cache holding one: the code is
            # fetched for a link at load, and the next start finds the link in the cache.
            bare, _ = self.fresh()
            ref = f"oci://{reg.url}/example:bare"
            subprocess.run([os.environ["CUDAQ_RT_LINK"], bare, "--push", ref], check=True,
                           capture_output=True, env=self.env(cache))
            with open(os.path.join(bare, "manifest.json"), "rb") as f:
                text = f.read()
            stored = stored_forms(bare)
            code = {stored.get(c["digest"], (c["digest"],))[0]
                    for c in json.loads(text)["containers"]}
            config = "sha256:" + hashlib.sha256(text).hexdigest()
            bare_cache = os.path.join(self.tmp, "bare-cache")
            for label, source in (("oci:// link at load", "link at load"),
                                  ("oci:// from the cache", "cache")):
                mark = len(reg.requests())
                t0 = time.monotonic()
                doc = self.echo_from(ref, cache=bare_cache)
                times[label] = time.monotonic() - t0
                self.assertEqual(doc["cubin"]["source"], source)
                fetched = {q.path.rsplit("/", 1)[1] for q in reg.requests(since=mark)
                           if "/blobs/" in q.path}
                if source == "cache":
                    self.assertEqual(fetched, set())
                else:
                    self.assertTrue(fetched & code, fetched)
                    self.assertEqual(fetched - code, {config})
            for label, s in times.items():
                print(f"start + echo, {label}: {s * 1000:.0f} ms")

    def test_under_trust_on_a_gpu(self):
        # Signatures on the GPU: a signed package serves under --trust, from its own record, from a
        # signed cache entry, or linked at load from its signed inputs; an unsigned one is
        # refused with one line; an entry no trusted key signed is not used.
        keys = os.path.join(self.tmp, "keys")
        os.makedirs(keys, exist_ok=True)
        for k in ("ci", "other"):
            subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out",
                            f"{keys}/{k}.pem"], check=True, capture_output=True)
            subprocess.run(["openssl", "pkey", "-in", f"{keys}/{k}.pem", "-pubout", "-out",
                            f"{keys}/{k}.pub"], check=True, capture_output=True)
        trust = ["--trust", f"{keys}/ci.pub"]
        pkg, cache = self.fresh()
        r, _ = self.run_tool(pkg, *trust, "--call", "echo", "--arg", "hex:2a17", cache=cache)
        self.assertEqual(r.returncode, 1)
        self.assert_one_error(r, "not signed: no signature in signatures/")
        # An unsigned entry in the cache (a load without trust), then the package signed.
        plain = self.echo_from(pkg, cache=cache)
        self.assertEqual(plain["cubin"]["source"], "link at load")
        subprocess.run([os.environ["CUDAQ_RT_LINK"], pkg, "--sign", f"{keys}/ci.pem"],
                       check=True, capture_output=True, env=self.env(cache))
        self.assertEqual(self.echo_from(pkg, cache=cache)["cubin"]["source"], "cache")
        # Under trust the unsigned entry is a miss: linked at load, the same cubin, and stored
        # signed by --sign; then the signed entry serves.
        doc = self.echo_from(pkg, *trust, "--sign", f"{keys}/ci.pem", cache=cache)
        self.assertEqual(doc["cubin"]["source"], "link at load")
        self.assertEqual(doc["cubin"]["digest"], plain["cubin"]["digest"])
        doc = self.echo_from(pkg, *trust, cache=cache)
        self.assertEqual(doc["cubin"]["source"], "cache")
        # Stored in the package with --store, signed again: the package's own record serves.
        self.echo_from(pkg, *trust, "--no-cache", "--store", "--sign", f"{keys}/ci.pem",
                       cache=cache)
        doc = self.echo_from(pkg, *trust, "--no-link", "--no-cache", cache=cache)
        self.assertEqual(doc["cubin"]["source"], "package")
        r, _ = self.run_tool(pkg, "--trust", f"{keys}/other.pub", "--list", cache=cache)
        self.assertEqual(r.returncode, 1)
        self.assert_one_error(r, "signed only by keys that are not trusted")

    def test_linked_ahead_of_time(self):
        pkg, cache = self.fresh()
        self.link_ahead(pkg, cache=os.path.join(self.tmp, "link-ahead-cache"))
        record = next(l for l in self.manifest(pkg)["links"] if l["arch"] == ARCH)
        self.assertEqual(self.listed(pkg, "--no-link", cache=cache)["source"], "package")
        # Neither the cache nor a link is needed: the package alone serves.
        doc = self.echo_from(pkg, "--no-link", "--no-cache", cache=cache)
        self.assertEqual(doc["cubin"]["source"], "package")
        self.assertEqual(doc["cubin"]["digest"], record["cubin"]["digest"])
        self.assertEqual(cache_entries(cache), [], "a load from the package wrote to the cache")

    def test_no_link_without_cubin(self):
        pkg, cache = self.fresh()
        listed = self.listed(pkg, "--no-link", cache=cache, status=1)
        self.assertNotIn("source", listed)
        self.assertIn("linking at load is off", listed["why_not"])
        r, _ = self.run_tool(pkg, "--no-link", "--call", "echo", cache=cache)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assert_one_error(r, f"no cubin for {ARCH} (bridge loopback, dispatcher builtin)",
                              "linking at load is off",
                              f"link it ahead of time for {ARCH}")
        self.assertEqual(self.manifest(pkg)["links"], [])
        self.assertEqual(cache_entries(cache), [], "--no-link wrote to the cache")


class FaultTest(RunCase):
    """Handlers that break the kernel: a clear error and exit status 1 in bounded time, and a GPU
    that the next process can use."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.pkg = cls.pack(FAULT_APP, "faults")
        cls.link_ahead(cls.pkg)

    def assert_gpu_serves(self):
        """A new process on the same GPU answers `ok`."""
        r, _ = self.run_tool(self.pkg, "--call", "ok", timeout=30)
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "ok\n", ""))

    def fault(self, handler, cuda_error, limit=20):
        r, seconds = self.run_tool(self.pkg, "--call", handler, timeout=limit + 30)
        self.assertLess(seconds, limit, f"{handler} took {seconds:.1f} s")
        self.assertEqual(r.returncode, 1, f"{r.stdout}{r.stderr}")
        errors = [l for l in r.stderr.splitlines() if l.startswith("cudaq-rt-run: error: ")]
        self.assertEqual(len(errors), 1, r.stderr)
        self.assertIn(f"the dispatch kernel {self.kernel} failed: {cuda_error}", errors[0])
        # A fault reaches the host when the GPU reports it: before the response (nothing printed;
        # the kernel was serving the request) or, for a store that faults late, after the
        # response was published (its answer printed; the fault named after it).
        if r.stdout == "":
            self.assertIn(f", serving request_id 1 (handler '{handler}')", errors[0])
        else:
            self.assertEqual(r.stdout, "ok\n")
            self.assertIn(f", after answering request_id 1 (handler '{handler}')", errors[0])

    def test_illegal_address(self):
        self.fault("fault_illegal_address", "CUDA_ERROR_ILLEGAL_ADDRESS")
        self.assert_gpu_serves()

    def test_trap(self):
        self.fault("fault_trap", "CUDA_ERROR_LAUNCH_FAILED")
        self.assert_gpu_serves()

    def test_fault_stops_a_calls_file(self):
        # What came before the fault is answered; nothing after it is sent.
        r, seconds = self.run_tool(self.pkg, "--calls", "-", stdin="ok\nfault_trap\nok\n",
                                   timeout=50)
        self.assertLess(seconds, 20)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stdout, "ok\n")
        errors = [l for l in r.stderr.splitlines() if l.startswith("cudaq-rt-run: error: ")]
        self.assertEqual(len(errors), 1, r.stderr)
        self.assertIn("CUDA_ERROR_LAUNCH_FAILED", errors[0])
        self.assertIn("serving request_id 2 (handler 'fault_trap')", errors[0])
        self.assert_gpu_serves()

    def test_spin_forever_is_hung(self):
        r, seconds = self.run_tool(self.pkg, "--call", "spin_forever", "--timeout", "2",
                                   "--stop-timeout", "1", timeout=60)
        self.assertLess(seconds, 15, "the process did not exit promptly after the hang")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stdout, "")
        errors = [l for l in r.stderr.splitlines() if l.startswith("cudaq-rt-run: error: ")]
        self.assertEqual(len(errors), 2, r.stderr)
        self.assertIn(f"{ARCH}: no response within 2 s", errors[0])
        self.assertIn(f"the dispatch kernel {self.kernel} did not stop within 1 s: it is hung, serving "
                      "request_id 1 (handler 'spin_forever')", errors[1])
        self.assert_gpu_serves()

    def test_spin_forever_json(self):
        r, seconds = self.run_tool(self.pkg, "--json", "--call", "spin_forever", "--timeout", "2",
                                   "--stop-timeout", "1", timeout=60)
        self.assertLess(seconds, 15)
        self.assertEqual(r.returncode, 1, r.stderr)
        doc = json.loads(r.stdout)
        assert_document(self, doc)
        self.assertEqual(doc["exit_status"], 1)
        self.assertIn("no response within 2 s", doc["error"])
        self.assertEqual(doc["calls"], [])
        self.assertIn("hung", r.stderr)
        self.assert_gpu_serves()


class WarpHandlersTest(HandlersTest):
    """Every handler test again, served by the warp dispatcher."""
    dispatcher = "warp"
    kernel = "cudaq_rt_warp_dispatch"


class WarpBlocksHandlersTest(HandlersTest):
    """Every handler test again, served by the warp dispatcher as two blocks: two warps, each
    with its own half of the ring, and their counters summed (the bench tests count them)."""
    dispatcher = "warp"
    kernel = "cudaq_rt_warp_dispatch"
    grid = "2,32"

    def test_shape_refused(self):
        for grid in ("2,64", "33,32"):
            r = subprocess.run([RUN, self.pkg, "--dispatcher", "warp", "--grid", grid, "--call",
                                "echo", "--arg", "u32:1"], capture_output=True, text=True,
                               env=self.env(), timeout=60)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assert_one_error(r, "the warp dispatcher is launched as 1 to 32 blocks of 32 "
                                  f"threads, not {grid}")

    def test_ring_that_does_not_split(self):
        # 96 slots do not split into two warps' groups of 32: the bridge says so at load.
        r, _ = self.run_tool(self.pkg, "--call", "echo", "--arg", "u32:1", "--bridge-arg",
                             "slots=96")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assert_one_error(r, "bridge 'loopback': warps=2 needs a multiple of 64 slots, "
                              "not slots=96")


class WarpFaultTest(FaultTest):
    """Every fault test again, served by the warp dispatcher."""
    dispatcher = "warp"
    kernel = "cudaq_rt_warp_dispatch"


if __name__ == "__main__":
    main(ARCH is not None)
