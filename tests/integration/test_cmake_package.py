#!/usr/bin/python3
"""The installed CMake package, used the way another project uses it.

Installs the build tree into a temporary prefix, configures and builds outside_project/ against
it, in a temporary directory (find_package(cudaq-rt), cudaq_rt_device_code, cudaq_rt_add_dispatch_kernel,
cudaq_rt_add_package), checks the packages the build made (one with a custom dispatch kernel, two
without, with and without BRIDGE), then checks that a rebuild with
nothing changed packs and links nothing, and that touching a handler source does.

Environment (set by ctest): CUDAQ_RT_BUILD_DIR (the tree to install), CMAKE_COMMAND,
CMAKE_MAKE_PROGRAM (ninja), NVCC.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from harness import NVCC, blob_file, check, fnv1a32, validate_schema

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD_DIR = os.environ.get("CUDAQ_RT_BUILD_DIR", os.path.join(HERE, "../../build"))
CMAKE = os.environ.get("CMAKE_COMMAND", "cmake")
NINJA = os.environ.get("CMAKE_MAKE_PROGRAM", "ninja")
# The installed tree's own compile and link flags: a sanitizer build of cudaq-rt needs the
# outside program built the same way, or the sanitizer runtime does not load first.
CXX_FLAGS = os.environ.get("CUDAQ_RT_CXX_FLAGS", "")
EXE_LINKER_FLAGS = os.environ.get("CUDAQ_RT_EXE_LINKER_FLAGS", "")
PROJECT = os.path.join(HERE, "outside_project")
PROJECT_ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

HANDLERS = {"negate_i32", "xor_bytes"}
DISPATCHER = "outside_ping_dispatch"
ARCHS = {"sm_80", "sm_90"}


class CMakePackage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cudaq-rt-cmake-")
        cls.prefix = os.path.join(cls.tmp, "prefix")
        cls.source = os.path.join(cls.tmp, "outside_project")
        cls.build = os.path.join(cls.tmp, "build")
        shutil.copytree(PROJECT, cls.source)
        cls.env = dict(os.environ)
        # The build step must find the bridge in the prefix and use its own cache.
        for var in ("CUDAQ_RT_BRIDGE_PATH", "CUDAQ_RT_CACHE_DIR", "CUDAQ_RT_CACHE_DISABLE"):
            cls.env.pop(var, None)
        check([CMAKE, "--install", BUILD_DIR, "--prefix", cls.prefix])
        check([CMAKE, "-S", cls.source, "-B", cls.build, "-G", "Ninja",
             "-DCMAKE_MAKE_PROGRAM=" + NINJA, "-DCMAKE_CUDA_COMPILER=" + NVCC,
             "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_PREFIX_PATH=" + cls.prefix,
             "-DCMAKE_CXX_FLAGS=" + CXX_FLAGS, "-DCMAKE_EXE_LINKER_FLAGS=" + EXE_LINKER_FLAGS],
            env=cls.env)
        cls.first_build = check([CMAKE, "--build", cls.build], env=cls.env)
        cls.package = os.path.join(cls.build, "packages", "outside.cudaqpkg")
        cls.manifest_path = os.path.join(cls.package, "manifest.json")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def manifest(self):
        with open(self.manifest_path) as f:
            return json.load(f)

    def test_1_installed_layout(self):
        p = self.prefix
        for rel in ["bin/cudaq-rt-pack", "bin/cudaq-rt-link",
                    "lib/cudaq-rt/bridges/libcudaq_rt_bridge_loopback.so",
                    "include/cudaq_rt/exports.h", "include/cudaq_rt/dispatch_framing.cuh",
                    "include/cudaq_rt/bridge.h", "share/cudaq-rt/schemas/manifest.schema.json",
                    "bin/cudaq-rt-client", "lib/cudaq-rt/python/cudaq_rt_client/__init__.py",
                    "lib/cudaq-rt/python/cudaq_rt_client/py.typed",
                    "share/man/man1/cudaq-rt-client.1", "share/man/man3/cudaq_rt_load.3",
                    "share/man/man7/cudaq-rt.7", "share/man/man7/cudaq-rt-bridge.7"]:
            self.assertTrue(os.path.isfile(os.path.join(p, rel)), rel)
        # The installed client runs its installed package.
        r = subprocess.run([os.path.join(p, "bin", "cudaq-rt-client"), "--version"],
                           capture_output=True, text=True, cwd=p, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("cudaq-rt-client "), r.stdout)
        self.assertTrue(glob.glob(os.path.join(p, "lib*/libcudaq_rt.so")))
        self.assertTrue(glob.glob(os.path.join(p, "lib*/cmake/cudaq-rt/cudaq-rtConfig.cmake")))

    def test_1a_installed_python_package(self):
        """cudaq_rt from <prefix>/lib/cudaq-rt/python finds the prefix's runtime, as the tools
        do; a pure install elsewhere finds it through CUDAQ_RT_PREFIX."""
        p = self.prefix
        probe = ("import cudaq_rt, sys; print(cudaq_rt.library_path()); "
                 "print(cudaq_rt.open_package(sys.argv[1]).handlers); "
                 "fast = cudaq_rt._library.fastcall(); print(fast and fast.__file__)")
        # cudaq_rt._fastcall, where the build made it, is installed in the prefix's package.
        built = os.path.isfile(os.path.join(BUILD_DIR, "lib", "cudaq-rt", "python", "cudaq_rt",
                                            "_fastcall.abi3.so"))
        fastcall = os.path.join(p, "lib", "cudaq-rt", "python", "cudaq_rt", "_fastcall.abi3.so")
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUDAQ_RT_")}
        package = os.path.join(self.build, "packages", "outside.cudaqpkg")
        for extra in ({"PYTHONPATH": os.path.join(p, "lib", "cudaq-rt", "python")},
                      {"PYTHONPATH": os.path.join(PROJECT_ROOT, "python"), "CUDAQ_RT_PREFIX": p}):
            r = subprocess.run([sys.executable, "-c", probe, package], capture_output=True,
                               text=True, env={**env, **extra}, cwd=self.tmp, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            library, handlers, fast = r.stdout.splitlines()
            self.assertTrue(library.startswith(os.path.join(p, "lib")), (extra, library))
            self.assertIn("'", handlers)
            self.assertEqual(fast, fastcall if built else "None", extra)

    def test_1b_stripped_install_is_lean(self):
        """`cmake --install --strip`: the tools share libcudaq_rt.so (LLVM inside it once), so
        the whole install stays under 25 MiB; its tools run from there."""
        lean = os.path.join(self.tmp, "lean")
        check([CMAKE, "--install", BUILD_DIR, "--prefix", lean, "--strip"])
        total = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(lean)
                    for f in files if not os.path.islink(os.path.join(d, f)))
        print(f"stripped install: {total / 2**20:.1f} MiB")
        self.assertLess(total, 25 * 2**20)
        for tool in ("cudaq-rt-pack", "cudaq-rt-link", "cudaq-rt-run"):
            exe = os.path.join(lean, "bin", tool)
            self.assertLess(os.path.getsize(exe), 2 * 2**20, tool)  # no runtime of its own
            self.assertRegex(check([exe, "--version"]), rf"^{tool} \d+\.\d+\.\d+ ")
        listing = check([os.path.join(lean, "bin", "cudaq-rt-pack"), "--list", self.package])
        self.assertIn("negate_i32", listing)

    def test_2_package(self):
        self.assertIn("Packing outside_app into outside.cudaqpkg", self.first_build)
        m = self.manifest()
        schema = validate_schema.load(os.path.join(self.prefix,
                                                   "share/cudaq-rt/schemas/manifest.schema.json"))
        self.assertEqual(validate_schema.validate(schema, m), [])
        handlers = {e["name"]: e for e in m["exports"] if e["kind"] == "handler"}
        self.assertEqual(set(handlers), HANDLERS)
        for name, e in handlers.items():
            self.assertEqual(e["function_id"], fnv1a32(name))
        kernels = [e["name"] for e in m["exports"] if e["kind"] == "dispatch-kernel"]
        self.assertEqual(kernels, [DISPATCHER])
        roles = {c["role"] for c in m["containers"]}
        self.assertIn("dispatcher", roles)
        self.assertIn("application", roles)
        links = {l["arch"]: l for l in m["links"]}
        self.assertEqual(set(links), ARCHS)
        for l in links.values():
            self.assertEqual(l["dispatcher"], DISPATCHER)
            self.assertEqual(l["bridge"], "loopback")
        digests = [c["digest"] for c in m["containers"]] + [l["cubin"]["digest"] for l in m["links"]]
        for d in digests:
            self.assertTrue(os.path.isfile(blob_file(self.package, d)), d)
        # The link cache defaults to the project's build tree.
        self.assertTrue(os.listdir(os.path.join(self.build, "cudaq-rt-cache")))

    def test_2b_step_options(self):
        """ALIAS, DISPATCHER, LTO, LINK_OPTIONS, JOBS and JOB_POOL reach the tools: the manifest
        records the alias and a link by the warp dispatcher, whole-program, with -O3 among its
        options; Ninja runs the step in the pool; a step with a bad option is refused at
        configure time."""
        with open(os.path.join(self.build, "packages", "tuned.cudaqpkg", "manifest.json")) as f:
            m = json.load(f)
        self.assertEqual([(a["name"], a["handler"]) for a in m["aliases"]],
                         [("add_one", "add_one_handler")])
        (link,) = m["links"]
        # "lto": the whole program in one LTO link (per TU would be "lto-per-tu").
        self.assertEqual((link["arch"], link["dispatcher"], link["mode"]),
                         ("sm_90", "warp", "lto"))
        self.assertIn("-O3", link["options"])
        with open(os.path.join(self.build, "build.ninja")) as f:
            ninja = f.read()
        step = [b for b in ninja.split("\nbuild ") if "tuned.cudaqpkg/manifest.json" in b.split(":")[0]]
        self.assertEqual(len(step), 1, "no build statement for the tuned package")
        self.assertIn("pool = cudaq_rt_links", step[0])
        self.assertIn("-DCUDAQ_RT_STEP_LINK_OPTIONS=-O3", step[0])  # a change reruns the step
        bad = os.path.join(self.tmp, "bad_option")
        os.makedirs(bad)
        with open(os.path.join(bad, "CMakeLists.txt"), "w") as f:
            f.write("cmake_minimum_required(VERSION 3.25)\nproject(bad LANGUAGES CXX)\n"
                    "find_package(cudaq-rt REQUIRED)\nadd_executable(app main.cpp)\n"
                    "cudaq_rt_add_package(TARGET app LTO fast)\n")
        with open(os.path.join(bad, "main.cpp"), "w") as f:
            f.write("int main() { return 0; }\n")
        r = subprocess.run([CMAKE, "-S", bad, "-B", os.path.join(bad, "build"), "-G", "Ninja",
                            "-DCMAKE_MAKE_PROGRAM=" + NINJA, "-DCMAKE_PREFIX_PATH=" + self.prefix],
                           capture_output=True, text=True, env=self.env)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("LTO is per-tu or whole, not 'fast'", r.stderr)

    def test_3_installed_tools_find_the_bridge_in_the_prefix(self):
        # The prefix comes first in the search path (before the build tree's fallback), and
        # holds the bridge, so that is the one the package step linked.
        link = os.path.join(self.prefix, "bin", "cudaq-rt-link")
        proc = subprocess.run([link, self.package, "--arch", "sm_90", "--bridge", "no_such_bridge"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=self.env)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        searched = proc.stderr.split("(searched: ", 1)[1].rstrip(")\n").split(", ")
        self.assertEqual(os.path.realpath(searched[0]),
                         os.path.join(os.path.realpath(self.prefix), "lib/cudaq-rt/bridges"))
        self.assertTrue(os.path.isfile(os.path.join(searched[0], "libcudaq_rt_bridge_loopback.so")))
        # The runtime library, linked from outside: it loads, and searches next to the program.
        out = check([os.path.join(self.build, "bridge_path")], env=self.env)
        self.assertIn(os.path.join(self.tmp, "lib/cudaq-rt/bridges"), out)
        # The C API, from a C program linked against the installed library.
        out = check([os.path.join(self.build, "capi_program"), "/nonexistent/x.cudaqpkg"],
                    env=self.env)
        self.assertEqual(out, "3 '/nonexistent/x.cudaqpkg': no such package\n")

    def test_3a_pkg_config(self):
        """The same C program built with no CMake: cc and the installed cudaq-rt.pc's flags."""
        pc_dirs = glob.glob(os.path.join(self.prefix, "lib*", "**", "pkgconfig"), recursive=True)
        self.assertEqual(len(pc_dirs), 1, pc_dirs)
        env = dict(self.env, PKG_CONFIG_PATH=pc_dirs[0])
        flags = check(["pkg-config", "--cflags", "--libs", "cudaq-rt"], env=env).split()
        includes = [os.path.realpath(f[2:]) for f in flags if f.startswith("-I")]
        self.assertEqual(includes, [os.path.join(os.path.realpath(self.prefix), "include")])
        version = check(["pkg-config", "--modversion", "cudaq-rt"], env=env).strip()
        self.assertRegex(version, r"^\d+\.\d+\.\d+$")
        exe = os.path.join(self.tmp, "capi_pkg_config")
        check(["cc", os.path.join(PROJECT, "capi_program.c"), "-o", exe, *flags], env=env)
        # The .pc's run path finds the library: no LD_LIBRARY_PATH (a program that cannot find
        # libcudaq_rt.so.0 exits 127 before main).
        run_env = {k: v for k, v in env.items() if k != "LD_LIBRARY_PATH"}
        out = check([exe, "/nonexistent/x.cudaqpkg"], env=run_env)
        self.assertEqual(out, "3 '/nonexistent/x.cudaqpkg': no such package\n")

    def test_3b_packages_without_a_dispatch_kernel(self):
        # cudaq_rt_add_package() alone, the common case: the built-in dispatch kernel, the
        # default bridge whether BRIDGE names it or not, ARCHS given or the default.
        schema = validate_schema.load(os.path.join(self.prefix,
                                                   "share/cudaq-rt/schemas/manifest.schema.json"))
        for target, name, archs in (("outside_plain", "outside_plain", ARCHS),
                                    ("outside_bridged", "bridged", {"sm_80"})):
            self.assertIn("Packing %s into %s.cudaqpkg" % (target, name), self.first_build)
            with open(os.path.join(self.build, "packages", name + ".cudaqpkg",
                                   "manifest.json")) as f:
                m = json.load(f)
            self.assertEqual(validate_schema.validate(schema, m), [])
            self.assertEqual({e["name"] for e in m["exports"]}, HANDLERS)
            self.assertEqual({c["role"] for c in m["containers"] if "added_by" not in c},
                             {"application"})
            self.assertEqual({l["arch"] for l in m["links"]}, archs)
            for l in m["links"]:
                self.assertEqual((l["dispatcher"], l["bridge"]), ("builtin", "loopback"))

    def test_4_rebuild(self):
        def step_pending():
            out = check([NINJA, "-C", self.build, "-n", "-d", "explain"], env=self.env)
            return "manifest.json" in out, out

        pending, out = step_pending()
        self.assertFalse(pending, out)
        before = os.stat(self.manifest_path).st_mtime_ns
        out = check([CMAKE, "--build", self.build], env=self.env)
        self.assertNotIn("Packing", out)
        self.assertEqual(os.stat(self.manifest_path).st_mtime_ns, before)

        time.sleep(1.1)  # file systems with one-second mtimes
        os.utime(os.path.join(self.source, "handlers.cu"))
        out = check([CMAKE, "--build", self.build], env=self.env)
        self.assertIn("Packing outside_app", out)
        self.assertGreater(os.stat(self.manifest_path).st_mtime_ns, before)
        # Linked again for both archs, from the cache (the device code did not change).
        self.assertEqual({l["arch"] for l in self.manifest()["links"]}, ARCHS)


if __name__ == "__main__":
    unittest.main(verbosity=2)
