#!/usr/bin/python3
"""The nvJitLink interposers (libcudaq_rt_nvjitlink_cu13.so, _cu12.so) against the newest library
NVIDIA publishes of each major, from its wheel (fetch_nvjitlink_wheels.py: 13.5, 12.9), under a
program built with that release's header (jitlink_client.cpp, compiled here against the wheel:
it calls that release's versioned names), with and without the interposer; and one handle shared
by two threads of a program, under the CUDA 13.0 interposer.

Environment (set by ctest): CUDAQ_RT_INTERPOSER_CU13, CUDAQ_RT_INTERPOSER_CU12, NVJITLINK_WHEELS
(fetch_nvjitlink_wheels.py's directory), JITLINK_CLIENT (the client built against the toolkit's
13.0 header), JITLINK_CLIENT_SOURCE, CXX, CUDAQ_RT_PACK, CUDAQ_RT_LINK, CUDAQ_RT_EXAMPLE_APP, NVCC.
"""
import concurrent.futures
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from harness import check, read, sha256_file  # noqa: E402

INTERPOSERS = {13: os.environ["CUDAQ_RT_INTERPOSER_CU13"],
               12: os.environ["CUDAQ_RT_INTERPOSER_CU12"]}
WHEELS = os.environ["NVJITLINK_WHEELS"]
CLIENT_13_0 = os.environ["JITLINK_CLIENT"]
CLIENT_SOURCE = os.environ["JITLINK_CLIENT_SOURCE"]
CXX = os.environ.get("CXX") or "c++"
PACK = os.environ["CUDAQ_RT_PACK"]
LINK = os.environ["CUDAQ_RT_LINK"]
APP = os.environ["CUDAQ_RT_EXAMPLE_APP"]
NVCC = os.environ.get("NVCC") or "nvcc"
HIT_LINE = "cudaq-rt-nvjitlink: this output came from the "
VERBOSE_LINE = re.compile(r"^cudaq-rt-nvjitlink: (hit|miss) sha256:([0-9a-f]+)", re.M)
# What could lead a child to another nvJitLink than the one a case means: the cases set these.
NOT_INHERITED = ("LD_PRELOAD", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH",
                 "CUDA_HOME", "CUDA_PATH")

# CUDA 12's nvJitLink reads no LTO-IR of CUDA 13 (test_the_library_refuses_cuda_13_ltoir) and the
# build has no CUDA 12 compiler, so the 12.x links take PTX, written here by hand for PTX ISA 8.0
# (CUDA 12.0 on; 12.9's ptxas reads up to 8.8 and refuses the 9.0 that CUDA 13's nvcc writes), so
# that it depends on no nvcc: a kernel that calls a function the other input defines, so that a
# link resolves a symbol across inputs and their order is part of it. Alone, the kernel is a link
# that fails. nvJitLink reads PTX up to its terminating NUL, which the files therefore hold.
KERNEL_PTX = r"""
.version 8.0
.target sm_80
.address_size 64

.extern .func (.param .b32 retval) cudaq_rt_test_twice(.param .b32 x);

.visible .entry cudaq_rt_test_scale(.param .u64 data, .param .u32 count)
{
  .reg .pred %p<2>;
  .reg .b32 %r<9>;
  .reg .b64 %rd<5>;

  ld.param.u64 %rd1, [data];
  ld.param.u32 %r2, [count];
  mov.u32 %r3, %ctaid.x;
  mov.u32 %r4, %ntid.x;
  mov.u32 %r5, %tid.x;
  mad.lo.s32 %r1, %r3, %r4, %r5;
  setp.ge.s32 %p1, %r1, %r2;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.s32 %rd3, %r1, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.u32 %r6, [%rd4];
  {
    .param .b32 x;
    st.param.b32 [x], %r6;
    .param .b32 retval;
    call.uni (retval), cudaq_rt_test_twice, (x);
    ld.param.b32 %r7, [retval];
  }
  add.s32 %r8, %r7, 1;
  st.global.u32 [%rd4], %r8;
DONE:
  ret;
}
"""
HELPER_PTX = r"""
.version 8.0
.target sm_80
.address_size 64

.visible .func (.param .b32 retval) cudaq_rt_test_twice(.param .b32 x)
{
  .reg .b32 %r<3>;

  ld.param.u32 %r1, [x];
  shl.b32 %r2, %r1, 1;
  st.param.b32 [retval], %r2;
  ret;
}
"""
UNDEFINED_CU = r"""
extern __device__ int cudaq_rt_test_nowhere(int);
extern "C" __global__ void uses_undefined(int *p) { *p = cudaq_rt_test_nowhere(*p); }
"""


def setUpModule():
    """The inputs of the example's whole-program link as cudaq-rt-link gives them to nvJitLink
    (as test_interposer.py makes them): the built-in dispatch kernel's fatbin (LTO-IR for
    compute_80), the direct calls' LTO-IR, then the loopback bridge's hooks and the application's
    containers (LTO-IR and cubins for sm_80 and sm_90); and the PTX."""
    global TMP, EXAMPLE
    TMP = tempfile.mkdtemp(prefix="cudaq-rt-nvjitlink-versions.")
    check([PACK, APP, "-o", os.path.join(TMP, "pkgs")])
    pkg = glob.glob(os.path.join(TMP, "pkgs", "*.cudaqpkg"))[0]
    check([LINK, pkg, "-a", "sm_90", "--lto", "whole", "--no-store", "--save-temps",
           os.path.join(TMP, "temps")], env=tool_env(None))
    d = os.path.join(TMP, "temps", "sm_90")
    fatbins = sorted(glob.glob(os.path.join(d, "*.fatbin")))
    EXAMPLE = types.SimpleNamespace(package=pkg, dispatcher=fatbins[0])
    EXAMPLE.inputs = [("fatbin", fatbins[0]), ("ltoir", os.path.join(d, "direct_calls.ltoir"))] + \
        [("fatbin", f) for f in fatbins[1:]]
    for name, text in (("kernel.ptx", KERNEL_PTX), ("helper.ptx", HELPER_PTX)):
        with open(os.path.join(TMP, name), "wb") as f:
            f.write(text.encode() + b"\0")


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def path(*parts):
    return os.path.join(TMP, *parts)


def fresh(name):
    d = tempfile.mkdtemp(prefix=name + ".", dir=TMP)
    os.rmdir(d)  # where the interposer or a tool makes it
    return d


def child_env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CUDAQ_RT_") and k not in NOT_INHERITED}
    env.update(extra or {})
    return env


def tool_env(cache, **extra):
    return child_env(dict(extra, **({"CUDAQ_RT_CACHE_DIR": cache} if cache else
                                    {"CUDAQ_RT_CACHE_DISABLE": "1"})))


def data_args(inputs):
    return [a for kind, f in inputs for a in ("--data", f"{kind}:{f}")]


def run_client(program, options, inputs, cache=None, interposer=None, args=(), env_extra=None):
    """One run of a jitlink_client: its returncode, stdout, stderr, output (bytes or None), hit
    (its info log says so) and key (the short key of the verbose line, or None)."""
    env = child_env({"CUDAQ_RT_NVJITLINK_VERBOSE": "1"})
    if cache:
        env["CUDAQ_RT_CACHE_DIR"] = cache
    else:
        env["CUDAQ_RT_CACHE_DISABLE"] = "1"
    if interposer:
        env["LD_PRELOAD"] = interposer
    env.update(env_extra or {})
    out = path(f"out-{os.urandom(6).hex()}")
    cmd = [program, *[a for o in options for a in ("-O", o)], "--info-log", "-o", out, *args,
           *data_args(inputs)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    r.cmd = cmd
    r.output = read(out) if os.path.exists(out) else None
    if r.output is not None:
        os.unlink(out)
    r.hit = HIT_LINE in r.stdout + r.stderr  # the info log, printed on success or failure
    verbose = VERBOSE_LINE.search(r.stderr)
    r.key = verbose.group(2) if verbose else None
    return r


def ptx_inputs():
    return [("ptx", path("kernel.ptx")), ("ptx", path("helper.ptx"))]


def entries(cache):
    return sorted(glob.glob(os.path.join(cache, "v1", "??", "*")))


def dynamic_names(library):
    """The names a library defines for the dynamic linker, each with its version node."""
    out = check(["nm", "-D", "--defined-only", library])
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def wheel(major):
    """(release, its unpacked wheel, the library's directory in it) of the newest nvJitLink of
    `major` under NVJITLINK_WHEELS: NVIDIA's layout of site-packages, nvidia/cu13/lib or (CUDA 12)
    nvidia/nvjitlink/lib, with include/ beside lib/."""
    sub = os.path.join("nvidia", f"cu{major}" if major >= 13 else "nvjitlink")
    roots = [d for d in glob.glob(os.path.join(WHEELS, f"{major}.*"))
             if os.path.exists(os.path.join(d, sub, "lib", f"libnvJitLink.so.{major}"))]
    if not roots:
        raise AssertionError(f"no nvJitLink {major}.x under {WHEELS}: run "
                             "tests/interpose/fetch_nvjitlink_wheels.py (ctest's fixture "
                             "setup.nvjitlink_wheels)")
    root = max(roots, key=lambda d: int(os.path.basename(d).split(".")[1]))
    return os.path.basename(root), root, sub


class ReleaseCases:
    """The cases of one release's wheel: MAJOR, ARCHS (the first is the default), options(arch),
    inputs(), failing_inputs() and misuse_cases() come from the class."""
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        cls.release, root, cls.wheel_sub = wheel(cls.MAJOR)
        cls.lib_dir = os.path.join(root, cls.wheel_sub, "lib")
        include = os.path.join(root, cls.wheel_sub, "include")
        cls.library = os.path.join(cls.lib_dir, f"libnvJitLink.so.{cls.MAJOR}")
        cls.interposer = INTERPOSERS[cls.MAJOR]
        cls.client = path(f"jitlink_client_{cls.release}")
        # DT_RUNPATH (--enable-new-dtags), which the loader searches after LD_LIBRARY_PATH: the
        # interposer standing in for the library in a directory on LD_LIBRARY_PATH then comes
        # before the wheel's. DT_RPATH would be searched before it.
        check([CXX, "-std=c++17", "-O1", "-I" + include, "-o", cls.client, CLIENT_SOURCE,
               "-L" + cls.lib_dir, f"-l:libnvJitLink.so.{cls.MAJOR}", "-Wl,-rpath," + cls.lib_dir,
               "-Wl,--enable-new-dtags", "-ldl", "-pthread"])
        dynamic = check(["readelf", "-d", cls.client])
        assert "(RUNPATH)" in dynamic and "(RPATH)" not in dynamic, dynamic
        # Built against this release's header: its versioned names.
        minor = cls.release.replace(".", "_")
        calls = check(["nm", "-D", "--undefined-only", cls.client])
        assert f"__nvJitLinkCreate_{minor}@libnvJitLink.so.{cls.MAJOR}" in calls, calls

    def link(self, cache, arch=None, interposed=True, inputs=None, expect=0, **kw):
        r = run_client(kw.pop("program", self.client), self.options(arch or self.ARCHS[0]),
                       self.inputs() if inputs is None else inputs, cache=cache,
                       interposer=self.interposer if interposed else None, **kw)
        self.assertEqual(r.returncode, expect, f"{' '.join(r.cmd)}\n{r.stdout}{r.stderr}")
        if interposed:
            self.assertEqual(r.hit, "cudaq-rt-nvjitlink: hit" in r.stderr, r.stderr)
        return r

    def test_the_interposer_defines_every_name_of_the_library(self):
        missing = sorted(dynamic_names(self.library) - dynamic_names(self.interposer))
        self.assertEqual(missing, [], f"{self.interposer} lacks names nvJitLink {self.release} "
                         f"({self.library}) defines: add the release to runtime/CMakeLists.txt's "
                         "CUDAQ_RT_NVJITLINK_RELEASES")

    def test_preloaded_a_miss_then_a_hit_with_the_real_output(self):
        for arch in self.ARCHS:
            with self.subTest(arch=arch):
                cache = fresh("cache")
                real = self.link(None, arch, interposed=False)
                self.assertTrue(real.output.startswith(b"\x7fELF"))
                cold = self.link(cache, arch)
                self.assertFalse(cold.hit)
                self.assertIn("stored", cold.stderr)
                self.assertEqual(cold.output, real.output)
                warm = self.link(cache, arch)
                self.assertTrue(warm.hit)
                self.assertEqual(warm.output, real.output)
                self.assertEqual(len(entries(cache)), 1)
                by_name = self.link(cache, arch, args=["--unversioned"])
                self.assertTrue(by_name.hit)
                self.assertEqual(by_name.output, real.output)

    def test_standing_in_for_the_library_on_the_loaders_path(self):
        # The key holds the real library's build ID: standing in, the interposer must load the
        # real library it forwards to when preloaded (the wheel's, the client's own through its
        # RUNPATH), and so compute the same key.
        preloaded = self.link(fresh("cache"))
        real = self.link(None, interposed=False)
        name = f"libnvJitLink.so.{self.MAJOR}"
        dropin = path(f"dropin-{self.release}")
        os.makedirs(dropin)
        os.symlink(self.interposer, os.path.join(dropin, name))
        # A virtual environment with NVIDIA's wheel installed, as CUDA-Q's Python install has.
        venv = path(f"venv-{self.release}")
        site_lib = os.path.join(venv, "lib", "python3.11", "site-packages", self.wheel_sub, "lib")
        os.makedirs(site_lib)
        os.symlink(self.library, os.path.join(site_lib, name))
        for how, extra in (("CUDAQ_RT_NVJITLINK_REAL", {"CUDAQ_RT_NVJITLINK_REAL": self.library}),
                           ("VIRTUAL_ENV", {"VIRTUAL_ENV": venv})):
            with self.subTest(real_found_through=how):
                env = dict(extra, LD_LIBRARY_PATH=dropin)
                cache = fresh("cache")
                cold = self.link(cache, interposed=False, env_extra=env)
                self.assertIn("cudaq-rt-nvjitlink: miss", cold.stderr)  # the stand-in is loaded
                self.assertEqual(cold.key, preloaded.key)
                self.assertEqual(cold.output, real.output)
                warm = self.link(cache, interposed=False, env_extra=env)
                self.assertTrue(warm.hit)
                self.assertEqual(warm.output, real.output)

    def test_calls_out_of_order_and_null_arguments_answer_as_the_real_library(self):
        for name, options, args in self.misuse_cases():
            with self.subTest(link=name):
                def misuse(interposed):
                    env = child_env({"CUDAQ_RT_CACHE_DIR": cache})
                    if interposed:
                        env["LD_PRELOAD"] = self.interposer
                    return check([self.client, *[a for o in options for a in ("-O", o)],
                                  "--misuse", *args], env=env)
                cache = fresh("cache")
                real = misuse(False)
                self.assertIn("complete 0", real)
                self.assertEqual(misuse(True), real)  # cold: the link is stored
                self.assertEqual(len(entries(cache)), 1)
                self.assertEqual(misuse(True), real)  # warm: a hit, answered the same

    def test_a_failed_link_is_never_stored(self):
        cache = fresh("cache")
        real = self.link(None, interposed=False, inputs=self.failing_inputs(), expect=1)
        self.assertIn("nvJitLinkComplete: result", real.stderr)
        for _ in range(2):
            r = self.link(cache, inputs=self.failing_inputs(), expect=1)
            # The same call, result code and logs as the real library gave.
            self.assertEqual(r.stderr[r.stderr.index("jitlink_client:"):], real.stderr)
            self.assertIn("nothing stored", r.stderr)
        self.assertEqual(entries(cache), [])


class Release13(ReleaseCases, unittest.TestCase):
    """The newest CUDA 13 release, on the example's inputs as CUDA-Q realtime links them."""
    MAJOR = 13
    ARCHS = ["sm_90"]

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.undefined = path("undefined.fatbin")
        check([NVCC, "-rdc=true", "-fatbin", "-gencode=arch=compute_90,code=lto_90",
               "-o", cls.undefined, "-x", "cu", "-"], input=UNDEFINED_CU)

    def options(self, arch):
        return [f"-arch={arch}", "-lto"]

    def inputs(self):
        return EXAMPLE.inputs

    def failing_inputs(self):
        return [("fatbin", self.undefined)]

    def misuse_cases(self):
        # After Complete, nvJitLink 13 takes AddData on a -lto link (0) and refuses it on one
        # without (INTERNAL): a hit must answer both as the real library does.
        return [("-lto", self.options("sm_90"), data_args(self.inputs())),
                ("ptx", ["-arch=sm_80"], data_args(ptx_inputs()))]

    def test_a_recording_linked_ahead_of_time_for_other_archs(self):
        record = fresh("record")
        cache = fresh("cache")
        r = self.link(cache, env_extra={"CUDAQ_RT_NVJITLINK_RECORD": record})
        self.assertIn("recorded under", r.stderr)
        [recording] = glob.glob(os.path.join(record, "*.cudaqpkg"))
        listing = check([PACK, "--list", recording])
        self.assertIn(f"through nvJitLink {self.release} for sm_90", listing)
        # Every input holds code for compute_80 (the dispatcher's LTO-IR only that), so the
        # recording links for sm_80 too; LTO-IR for compute_90 alone would not.
        out = check([LINK, recording, "-a", "sm_80", "-a", "sm_100"],
                    env=tool_env(cache, CUDAQ_RT_NVJITLINK=self.library))
        self.assertRegex(out, r"sm_80  linked")
        self.assertRegex(out, r"sm_100  linked")
        for arch in ("sm_80", "sm_100"):
            with self.subTest(arch=arch):
                hit = self.link(cache, arch)
                self.assertTrue(hit.hit)
                self.assertEqual(hit.output, self.link(None, arch, interposed=False).output)

    def test_the_toolkits_13_0_and_the_newest_13_never_share_an_entry(self):
        cache = fresh("cache")
        runs = {}
        for name, program in (("13.0", CLIENT_13_0), (self.release, self.client)):
            with self.subTest(client=name):
                runs[name] = self.link(cache, program=program)
                self.assertFalse(runs[name].hit)
        self.assertEqual(len(entries(cache)), 2)
        self.assertNotEqual(runs["13.0"].key, runs[self.release].key)
        for name, program in (("13.0", CLIENT_13_0), (self.release, self.client)):
            with self.subTest(client=name, run="second"):
                again = self.link(cache, program=program)
                self.assertTrue(again.hit)
                self.assertEqual(again.key, runs[name].key)

    def test_the_tools_link_with_the_newest_13(self):
        def link_json(*args, env):
            r = subprocess.run([LINK, EXAMPLE.package, "-a", "sm_90", "--json", *args], env=env,
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            return json.loads(r.stdout)
        default = link_json("--dry-run", env=tool_env(fresh("cache")))
        # The library comes from --nvjitlink where cudaq-rt-link has it, else from the variable.
        if "--nvjitlink" in check([LINK, "--help"]):
            chosen, env = ["--nvjitlink", self.library], tool_env(fresh("cache"))
        else:
            chosen, env = [], tool_env(fresh("cache"), CUDAQ_RT_NVJITLINK=self.library)
        linked = link_json("--no-store", *chosen, env=env)
        self.assertTrue(linked["ok"])
        self.assertEqual(linked["nvjitlink"]["version"], self.release)
        self.assertNotEqual(default["nvjitlink"]["version"], self.release,
                            "the toolkit's nvJitLink is this release: nothing to tell apart")
        [ours], [theirs] = linked["archs"], default["archs"]
        self.assertNotEqual(ours["cache_key"], theirs["cache_key"])
        self.assertNotEqual(ours["key"]["nvjitlink"]["build_id"],
                            theirs["key"]["nvjitlink"]["build_id"])


class Release12(ReleaseCases, unittest.TestCase):
    """The newest CUDA 12 release, on the PTX above (it reads no CUDA 13 LTO-IR)."""
    MAJOR = 12
    ARCHS = ["sm_80", "sm_90"]

    def options(self, arch):
        return [f"-arch={arch}"]

    def inputs(self):
        return ptx_inputs()

    def failing_inputs(self):
        return [("ptx", path("kernel.ptx"))]

    def misuse_cases(self):
        # nvJitLink 12.9 crashes (SIGSEGV) on AddData after Complete: a first input given by
        # --file, which --misuse does not add, makes the client skip that call ("-1").
        return [("ptx", ["-arch=sm_80"],
                 ["--file", "ptx:" + path("kernel.ptx"), *data_args(self.inputs())])]

    def test_the_library_refuses_cuda_13_ltoir(self):
        # The runtime's own device code (the dispatcher, LTO-IR of CUDA 13.0), as a program that
        # loads the 12.x wheel would add it; what the library answers, the interposer answers.
        lto = [("fatbin", EXAMPLE.dispatcher)]
        real = run_client(self.client, ["-arch=sm_90", "-lto"], lto)
        self.assertEqual(real.returncode, 1, real.stdout + real.stderr)
        failure = real.stderr.splitlines()
        log = real.stderr[real.stderr.index("error log:\n") + len("error log:\n"):].splitlines()
        print(f"\nnvJitLink {self.release} on CUDA 13.0 LTO-IR: {failure[0]}; first log line: "
              f"{log[0] if log else '(empty)'}", file=sys.stderr)
        cache = fresh("cache")
        r = run_client(self.client, ["-arch=sm_90", "-lto"], lto, cache=cache,
                       interposer=self.interposer)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr[r.stderr.index("jitlink_client:"):], real.stderr)
        self.assertEqual(entries(cache), [])


    def test_the_tools_refuse_it_for_a_package_naming_both_versions(self):
        # The package's link includes cudaq-rt's own device code (LTO-IR of CUDA 13): refused
        # before nvJitLink runs, in one line, with nothing written; --version names the library.
        cache = fresh("cache")
        r = subprocess.run([LINK, EXAMPLE.package, "-a", "sm_90", "--nvjitlink", self.library],
                           env=tool_env(cache), capture_output=True, text=True)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        [line] = r.stderr.splitlines()
        self.assertTrue(line.startswith(f"cudaq-rt-link: error: nvJitLink {self.release} ("),
                        line)
        self.assertIn("cannot link cudaq-rt's device code", line)
        self.assertIn("LTO-IR of CUDA 13.", line)
        self.assertEqual(entries(cache), [])
        version = check([LINK, "--version", "--nvjitlink", self.library])
        self.assertIn(f"nvJitLink {self.release} ({os.path.realpath(self.library)})", version)


class OneHandleFromTwoThreads(unittest.TestCase):
    """A program that adds a link's inputs to one handle from two threads at once (the CUDA 13.0
    client, --one-handle-threads 2): the order nvJitLink sees them in varies from run to run, and
    the interposer must key, record and store each link under the order the real library linked.
    Every recording (one per key) is linked again, in its recorded order, without the interposer,
    and must equal what the cache answers for its key, and what every run of that key got."""
    RUNS = 200
    OPTIONS = ["-arch=sm_90", "-lto"]

    def test_every_key_holds_the_link_of_its_recorded_order(self):
        start = time.monotonic()
        interposer = INTERPOSERS[13]
        cache, record = fresh("cache"), fresh("record")
        by_digest = {sha256_file(f): (kind, f) for kind, f in EXAMPLE.inputs}
        self.assertEqual(len(by_digest), len(EXAMPLE.inputs))

        def shared(_):
            return run_client(CLIENT_13_0, self.OPTIONS, EXAMPLE.inputs, cache=cache,
                              interposer=interposer, args=["--one-handle-threads", "2"],
                              env_extra={"CUDAQ_RT_NVJITLINK_RECORD": record})
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            runs = list(pool.map(shared, range(self.RUNS)))
        for r in runs:
            self.assertEqual(r.returncode, 0, f"{' '.join(r.cmd)}\n{r.stdout}{r.stderr}")
            self.assertIsNotNone(r.key, r.stderr)
        threaded_s = time.monotonic() - start

        orders = {}  # full key -> the inputs in the order recorded under it
        for recording in glob.glob(os.path.join(record, "*.cudaqpkg")):
            with open(os.path.join(recording, "manifest.json")) as f:
                recipe = json.load(f)["recipe"]
            self.assertEqual(recipe["options"], self.OPTIONS)
            recorded = [i["digest"] for i in recipe["inputs"]]
            # Each input once: none lost or added twice by the two threads.
            self.assertEqual(sorted(recorded), sorted(by_digest), recording)
            orders[recipe["cache_key"][len("sha256:"):]] = [by_digest[d] for d in recorded]
        self.assertEqual(len(orders), len(entries(cache)))
        of_run = lambda r: [k for k in orders if k.startswith(r.key)]
        for r in runs:
            self.assertEqual(len(of_run(r)), 1, f"run of key {r.key}: no recording of it")

        def check_key(key):  # one thread adds the inputs, in the recorded order
            real = run_client(CLIENT_13_0, self.OPTIONS, orders[key])
            cached = run_client(CLIENT_13_0, self.OPTIONS, orders[key], cache=cache,
                                interposer=interposer)
            return key, real, cached
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            checked = list(pool.map(check_key, sorted(orders)))
        for key, real, cached in checked:
            with self.subTest(key=key[:12]):
                self.assertEqual(real.returncode, 0, real.stderr)
                self.assertEqual(cached.returncode, 0, cached.stderr)
                self.assertTrue(cached.hit, cached.stderr)  # the recorded order is the key's
                self.assertTrue(key.startswith(cached.key))
                self.assertEqual(cached.output, real.output, "the cache's entry is not the "
                                 "real link of the order recorded under its key")
                for r in runs:
                    if of_run(r) == [key]:
                        self.assertEqual(r.output, real.output,
                                         f"a run of key {key[:12]} got another output")
        print(f"\n{self.RUNS} runs of one handle from two threads: {len(orders)} input orders "
              f"(keys), {sum(not r.hit for r in runs)} misses; {threaded_s:.0f} s, checked in "
              f"{time.monotonic() - start - threaded_s:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
