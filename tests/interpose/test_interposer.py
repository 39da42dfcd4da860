#!/usr/bin/python3
"""The nvJitLink interposer (libcudaq_rt_nvjitlink.so) under a program that links the way CUDA-Q
realtime does (jitlink_client: the built-in unified dispatch kernel's LTO-IR, the loopback
bridge's hooks and the example application's __nv_relfatbin containers, each added as a fatbin,
-arch=sm_90 -lto), run with and without it.

Environment (set by ctest): CUDAQ_RT_INTERPOSER, JITLINK_CLIENT, JITLINK_CLIENT_SANITIZED (may be
empty), CUDAQ_RT_PACK, CUDAQ_RT_LINK, CUDAQ_RT_EXAMPLE_APP, CUDAQ_RT_SCHEMA, NVCC, NGINX.
"""
import concurrent.futures
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from harness import check, make_ed25519_keys, read  # noqa: E402
from test_remote_cache import Nginx, nginx_has_dav  # noqa: E402

INTERPOSER = os.environ["CUDAQ_RT_INTERPOSER"]
CLIENT = os.environ["JITLINK_CLIENT"]
SANITIZED = os.environ.get("JITLINK_CLIENT_SANITIZED", "")
PACK = os.environ["CUDAQ_RT_PACK"]
LINK = os.environ["CUDAQ_RT_LINK"]
APP = os.environ["CUDAQ_RT_EXAMPLE_APP"]
NVCC = os.environ.get("NVCC", "nvcc")
SCHEMA = os.environ["CUDAQ_RT_SCHEMA"]
HIT_LINE = "cudaq-rt-nvjitlink: this output came from the "

EXTRA_CU = r"""
__device__ int cudaq_rt_test_extra(int x) { return x + 1; }
"""
UNDEFINED_CU = r"""
extern __device__ int cudaq_rt_test_nowhere(int);
extern "C" __global__ void uses_undefined(int *p) { *p = cudaq_rt_test_nowhere(*p); }
"""


def sha(data):
    return hashlib.sha256(data).hexdigest()


class InterposerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cudaq-rt-interposer-test.")
        t = cls.path
        check([PACK, APP, "-o", t("pkgs")])
        pkg = glob.glob(t("pkgs", "*.cudaqpkg"))[0]
        # The inputs of the example's whole-program link, as cudaq-rt-link gives them to nvJitLink.
        env = dict(os.environ, CUDAQ_RT_CACHE_DISABLE="1")
        check([LINK, pkg, "-a", "sm_90", "--lto", "whole", "--no-store", "--save-temps",
               t("temps")], env=env)
        d = t("temps", "sm_90")
        fatbins = sorted(glob.glob(os.path.join(d, "*.fatbin")))
        cls.dispatcher, cls.app = fatbins[0], fatbins[1:]
        cls.direct = os.path.join(d, "direct_calls.ltoir")
        cls.expected = read(os.path.join(d, "module.cubin"))
        check([NVCC, "-rdc=true", "-fatbin", "-gencode=arch=compute_90,code=lto_90",
               "-o", t("undefined.fatbin"), "-x", "cu", "-"], input=UNDEFINED_CU)
        check([NVCC, "-rdc=true", "-fatbin", "-gencode=arch=compute_90,code=lto_90",
               "-o", t("extra.fatbin"), "-x", "cu", "-"], input=EXTRA_CU)
        cls.count = 0

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def path(cls, *parts):
        return os.path.join(cls.tmp, *parts)

    def fresh(self, name="cache"):
        type(self).count += 1
        return self.path(f"{name}{self.count}")

    def inputs(self, how="--data", order=None):
        files = [("fatbin", self.dispatcher), ("ltoir", self.direct)] + \
            [("fatbin", f) for f in (order or self.app)]
        return [a for kind, f in files for a in (how, f"{kind}:{f}")]

    def client(self, cache, *args, arch="sm_90", interposed=True, program=CLIENT, env_extra=None,
               expect=0, inputs=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUDAQ_RT_")}
        env["CUDAQ_RT_NVJITLINK_VERBOSE"] = "1"
        if cache:
            env["CUDAQ_RT_CACHE_DIR"] = cache
        else:
            env["CUDAQ_RT_CACHE_DISABLE"] = "1"
        if interposed:
            env["LD_PRELOAD"] = INTERPOSER
        env["no_proxy"] = "127.0.0.1"
        env.update(env_extra or {})
        out = self.path(f"out{self.count}-{os.urandom(4).hex()}")
        cmd = [program, "-O", f"-arch={arch}", "-O", "-lto", "--info-log", "-o", out, *args]
        cmd += self.inputs() if inputs is None else inputs
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        self.assertEqual(r.returncode, expect, r.stdout + r.stderr)
        r.output = read(out) if os.path.exists(out) else None
        r.hit = HIT_LINE in r.stdout + r.stderr  # the info log, printed on success or failure
        # A hit reads its cubin when the program asks for it: one found corrupt then is linked
        # for real, and its info log is the real link's.
        r.hit_then_corrupt = "no longer matched its digest" in r.stderr
        self.assertEqual(r.hit, "cudaq-rt-nvjitlink: hit" in r.stderr and not r.hit_then_corrupt,
                         r.stderr)
        return r

    def entries(self, cache):
        return sorted(glob.glob(os.path.join(cache, "v1", "??", "*")))

    def test_second_run_is_a_hit_with_the_same_cubin(self):
        cache = self.fresh()
        cold = self.client(cache)
        self.assertFalse(cold.hit)
        self.assertIn("stored", cold.stderr)
        self.assertEqual(cold.output, self.expected)  # the real link's cubin, byte for byte
        warm = self.client(cache)
        self.assertTrue(warm.hit)
        self.assertEqual(warm.output, self.expected)
        self.assertEqual(len(self.entries(cache)), 1)
        # Through the names programs that load the library by name look up, too.
        by_name = self.client(cache, "--unversioned")
        self.assertTrue(by_name.hit)
        self.assertEqual(by_name.output, self.expected)

    def test_a_changed_option_input_or_order_misses(self):
        cache = self.fresh()
        self.client(cache)
        changed = [
            dict(args=["-O", "-O3"]),
            dict(arch="sm_80"),
            dict(inputs=self.inputs() + ["--data", f"fatbin:{self.path('extra.fatbin')}"]),
            dict(inputs=self.inputs(order=[self.app[1], self.app[0]] + self.app[2:])),
            dict(inputs=self.inputs()[:2] + ["--data", f"any:{self.direct}"] + self.inputs()[4:]),
        ]
        for kw in changed:
            with self.subTest(**{k: str(v)[:60] for k, v in kw.items()}):
                r = self.client(cache, *kw.pop("args", []), **kw)
                self.assertFalse(r.hit)
        self.assertEqual(len(self.entries(cache)), 1 + len(changed))
        self.assertTrue(self.client(cache).hit)

    def test_a_corrupt_entry_is_a_miss_and_is_replaced(self):
        # A flipped bit in the header's part (the metadata) is found at nvJitLinkComplete: a miss.
        # One in the cubin is found when the hit reads it into the program's buffer: the entry is
        # removed and the real link answers, the same bytes. Either way the next run stores it
        # anew and the one after hits.
        for where, at in (("metadata", 200), ("cubin", -100)):
            with self.subTest(where=where):
                cache = self.fresh()
                self.client(cache)
                [entry] = self.entries(cache)
                data = bytearray(read(entry))
                data[at] ^= 0x40
                with open(entry, "wb") as f:
                    f.write(data)
                r = self.client(cache)
                self.assertFalse(r.hit)
                self.assertEqual(r.hit_then_corrupt, where == "cubin", r.stderr)
                self.assertEqual(r.output, self.expected)
                if where == "cubin":
                    self.assertEqual(self.entries(cache), [])
                    self.assertFalse(self.client(cache).hit)
                self.assertTrue(self.client(cache).hit)

    def test_under_trust_only_a_signed_entry_hits(self):
        # The interposer reads CUDAQ_RT_TRUST and CUDAQ_RT_SIGN_KEY as the tools do: an entry that
        # no trusted key signed is a miss (the real link runs), one stored signed then hits.
        keys = self.fresh("keys")
        make_ed25519_keys(keys, "ci", "other")
        cache = self.fresh()
        trust = {"CUDAQ_RT_TRUST": f"{keys}/ci.pub"}
        self.assertIn("stored", self.client(cache).stderr)  # unsigned
        self.assertTrue(self.client(cache).hit)
        r = self.client(cache, env_extra=trust)
        self.assertFalse(r.hit)
        self.assertEqual(r.output, self.expected)
        r = self.client(cache, env_extra={"CUDAQ_RT_SIGN_KEY": f"{keys}/other.pem"})
        self.assertTrue(r.hit)  # no trust asked for: the unsigned entry is used, not re-signed
        self.client(cache, env_extra=dict(trust, CUDAQ_RT_SIGN_KEY=f"{keys}/other.pem"))
        self.assertFalse(self.client(cache, env_extra=trust).hit)  # signed, by the wrong key
        self.client(cache, env_extra=dict(trust, CUDAQ_RT_SIGN_KEY=f"{keys}/ci.pem"))
        r = self.client(cache, env_extra=trust)
        self.assertTrue(r.hit)
        self.assertEqual(r.output, self.expected)
        # A trust setting that cannot be loaded costs the cache, never the link.
        r = self.client(cache, env_extra={"CUDAQ_RT_TRUST": f"{keys}/missing.pub"})
        self.assertFalse(r.hit)
        self.assertEqual(r.output, self.expected)
        self.assertIn("not using a link cache: CUDAQ_RT_TRUST: ", r.stderr)

    def test_eight_processes_on_one_cold_cache(self):
        cache = self.fresh()
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as ex:
            runs = list(ex.map(lambda _: self.client(cache), range(8)))
        self.assertEqual({r.output for r in runs}, {self.expected})
        self.assertEqual(len(self.entries(cache)), 1)
        self.assertEqual(glob.glob(os.path.join(cache, "v1", "??", ".*")), [])  # no temporaries
        self.assertTrue(self.client(cache).hit)

    def test_threads_of_one_process(self):
        cache = self.fresh()
        self.client(cache, "--threads", "4")
        r = self.client(cache, "--threads", "4")
        self.assertTrue(r.hit)
        self.assertEqual(r.output, self.expected)

    def test_a_failed_link_is_the_real_one_every_time_and_stores_nothing(self):
        cache = self.fresh()
        inputs = ["--data", f"fatbin:{self.path('undefined.fatbin')}"]
        real = self.client(None, interposed=False, inputs=inputs, expect=1)
        self.assertIn("nvJitLinkComplete: result", real.stderr)
        for _ in range(2):
            r = self.client(cache, inputs=inputs, expect=1)
            # The same call, result code and error log as the real library gave.
            tail = r.stderr[r.stderr.index("jitlink_client:"):]
            self.assertEqual(tail, real.stderr)
            self.assertIn("nothing stored", r.stderr)
        self.assertEqual(self.entries(cache), [])

    def test_add_file_inputs(self):
        cache = self.fresh()
        by_file = self.client(cache, inputs=self.inputs("--file"))
        self.assertFalse(by_file.hit)
        self.assertEqual(by_file.output, self.expected)
        # The same bytes, of the same types, in the same order: one link, whichever call added them.
        self.assertTrue(self.client(cache).hit)
        self.assertTrue(self.client(cache, inputs=self.inputs("--file")).hit)

    def test_a_ptx_link(self):
        cache = self.fresh()
        real = self.client(None, "-O", "-ptx", "--ptx", interposed=False)
        cold = self.client(cache, "-O", "-ptx", "--ptx")
        warm = self.client(cache, "-O", "-ptx", "--ptx")
        self.assertTrue(warm.hit)
        self.assertEqual(cold.output, real.output)
        self.assertEqual(warm.output, real.output)
        self.assertIn(b".entry cudaq_rt_unified_dispatch", warm.output)
        # The cubin of a -ptx link is what the real library says it is, hit or not.
        no_cubin = self.client(cache, "-O", "-ptx", expect=1)
        real_no_cubin = self.client(None, "-O", "-ptx", interposed=False, expect=1)
        first_line = lambda r: r.stderr[r.stderr.index("jitlink_client:"):].splitlines()[0]
        self.assertEqual(first_line(no_cubin), first_line(real_no_cubin))
        self.assertIn("GetLinkedCubinSize: result", first_line(no_cubin))

    def test_calls_out_of_order_and_null_arguments_answer_as_the_real_library(self):
        def misuse(cache, interposed):
            env = {k: v for k, v in os.environ.items() if not k.startswith("CUDAQ_RT_")}
            env.update(CUDAQ_RT_CACHE_DIR=cache)
            if interposed:
                env["LD_PRELOAD"] = INTERPOSER
            return check([CLIENT, "-O", "-arch=sm_90", "-O", "-lto", "--misuse", *self.inputs()],
                         env=env)
        cache = self.fresh()
        real = misuse(cache, False)
        self.assertIn("complete 0", real)
        self.assertEqual(misuse(cache, True), real)  # cold: the link is stored
        self.assertEqual(len(self.entries(cache)), 1)
        self.assertEqual(misuse(cache, True), real)  # warm: a hit, answered the same

    def test_a_cache_that_cannot_be_written_warns_once_and_links(self):
        blocker = self.path("not-a-directory")
        with open(blocker, "w") as f:
            f.write("x")
        r = self.client(os.path.join(blocker, "cache"), "--threads", "3")
        self.assertEqual(r.output, self.expected)
        warnings = [l for l in r.stderr.splitlines() if "warning" in l]
        self.assertEqual(len(warnings), 1, r.stderr)
        self.assertIn("this process warns once", warnings[0])

    def test_no_interposer_no_cache_and_disabled(self):
        cache = self.fresh()
        self.client(cache, env_extra={"CUDAQ_RT_CACHE_DISABLE": "1"})
        self.assertFalse(os.path.exists(os.path.join(cache, "v1")))

    def test_cudaq_rt_tools_under_the_interposer_do_not_cache_twice(self):
        cache = self.fresh()
        pkg = glob.glob(self.path("pkgs", "*.cudaqpkg"))[0]
        env = dict(os.environ, LD_PRELOAD=INTERPOSER, CUDAQ_RT_CACHE_DIR=cache,
                   CUDAQ_RT_NVJITLINK_VERBOSE="1")
        out = check([LINK, pkg, "-a", "sm_90", "--lto", "whole", "--no-store", "--json"], env=env)
        self.assertNotIn("cudaq-rt-nvjitlink:", out)
        self.assertEqual(len(self.entries(cache)), 1)  # cudaq-rt-link's own entry only

    def test_the_library_needs_no_nvjitlink_and_stands_in_for_it(self):
        needed = check(["readelf", "-d", INTERPOSER])
        self.assertNotIn("libnvJitLink", needed)
        self.assertIn("(NEEDED)", needed)
        # Ahead of the real library on the loader's path, under its name: it loads the real one by
        # path (the CUDA install's, or $CUDAQ_RT_NVJITLINK_REAL).
        d = self.path("dropin")
        os.makedirs(d, exist_ok=True)
        shutil.copy(INTERPOSER, os.path.join(d, "libnvJitLink.so.13"))
        cache = self.fresh()
        extra = {"LD_LIBRARY_PATH": d}
        self.assertFalse(self.client(cache, interposed=False, env_extra=extra).hit)
        warm = self.client(cache, interposed=False, env_extra=extra)
        self.assertTrue(warm.hit)
        self.assertEqual(warm.output, self.expected)
        bad = self.client(cache, interposed=False, expect=1, env_extra=dict(
            extra, CUDAQ_RT_NVJITLINK_REAL=os.path.join(d, "libnvJitLink.so.13")))
        self.assertIn("cudaq-rt-nvjitlink: error:", bad.stderr)

    @unittest.skipUnless(nginx_has_dav(), "no nginx with the dav module")
    def test_a_remote_hit_from_nginx(self):
        server = Nginx(self.fresh("nginx"))
        try:
            url = server.url("cache/interposer")
            a = self.client(self.fresh(), env_extra={"CUDAQ_RT_REMOTE_CACHE": url})
            self.assertFalse(a.hit)
            self.assertIn("remote cache: stored", a.stderr)
            b = self.client(self.fresh(), env_extra={"CUDAQ_RT_REMOTE_CACHE": url})
            self.assertTrue(b.hit)
            self.assertIn("(remote)", b.stderr)
            self.assertIn("from the remote link cache", b.stdout)
            self.assertEqual(b.output, self.expected)
        finally:
            server.stop()

    @unittest.skipUnless(nginx_has_dav(), "no nginx with the dav module")
    def test_a_recording_linked_and_pushed_is_a_remote_hit_for_the_fleet(self):
        server = Nginx(self.fresh("nginx"))
        try:
            url = server.url("cache/fleet")
            record = self.fresh("record")
            self.client(None, env_extra={"CUDAQ_RT_NVJITLINK_RECORD": record})
            [recording] = glob.glob(os.path.join(record, "*.cudaqpkg"))
            env = dict(os.environ, CUDAQ_RT_CACHE_DIR=self.fresh(), no_proxy="127.0.0.1")
            env.pop("CUDAQ_RT_REMOTE_CACHE", None)
            check([LINK, recording, "-a", "sm_100"], env=env)
            pushed = check([LINK, "--cache-push", recording, "--remote-cache", url], env=env)
            self.assertRegex(pushed, r"sm_100  pushed")
            node = self.client(self.fresh(), arch="sm_100",
                               env_extra={"CUDAQ_RT_REMOTE_CACHE": url})
            self.assertTrue(node.hit)
            self.assertIn("(remote)", node.stderr)
            self.assertEqual(node.output,
                             self.client(None, arch="sm_100", interposed=False).output)
        finally:
            server.stop()

    def test_recording_then_ahead_of_time_links_for_other_archs(self):
        record = self.fresh("record")
        cache = self.fresh()
        r = self.client(cache, env_extra={"CUDAQ_RT_NVJITLINK_RECORD": record})
        self.assertIn("recorded under", r.stderr)
        self.client(cache, env_extra={"CUDAQ_RT_NVJITLINK_RECORD": record})  # once per key
        [recording] = glob.glob(os.path.join(record, "*.cudaqpkg"))
        listing = check([PACK, "--list", recording])
        self.assertIn("recipe: a link jitlink_client made through nvJitLink", listing)
        self.assertIn("options: -arch=sm_90 -lto", listing)
        self.assertEqual(listing.count("  input ["), 2 + len(self.app))
        # Linked ahead of time, on this machine without a GPU, into another machine's cache.
        fleet = self.fresh("fleet")
        env = dict(os.environ, CUDAQ_RT_CACHE_DIR=fleet)
        out = check([LINK, recording, "-a", "sm_80,sm_100"], env=env)
        self.assertRegex(out, r"sm_80  linked")
        self.assertRegex(out, r"sm_100  linked")
        again = check([LINK, recording, "-a", "sm_80,sm_100"], env=env)
        self.assertRegex(again, r"sm_80  cached")
        self.assertIn("links:", check([PACK, "--list", recording]))
        from validate_schema import validate
        with open(SCHEMA) as f, open(os.path.join(recording, "manifest.json")) as m:
            self.assertEqual(validate(json.load(f), json.load(m)), [])
        # The fleet's GPUs then link nothing.
        for arch in ("sm_80", "sm_100"):
            with self.subTest(arch=arch):
                hit = self.client(fleet, arch=arch)
                self.assertTrue(hit.hit)
                real = self.client(None, arch=arch, interposed=False)
                self.assertEqual(hit.output, real.output)

    @unittest.skipUnless(SANITIZED, "no sanitized build of the client")
    def test_under_address_and_undefined_behaviour_sanitizers(self):
        cache = self.fresh()
        env = {"ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=1",
               "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
               "LSAN_OPTIONS": "suppressions=" + os.path.join(os.path.dirname(__file__), "..",
                                                              "lsan.supp")}
        for hit in (False, True):
            r = self.client(cache, "--threads", "2", program=SANITIZED, env_extra=env)
            self.assertEqual(r.hit, hit)
            self.assertEqual(r.output, self.expected)
            self.assertNotIn("runtime error", r.stderr)
        self.client(cache, program=SANITIZED, env_extra=env, inputs=["--data", "fatbin:" +
                    self.path("undefined.fatbin")], expect=1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
