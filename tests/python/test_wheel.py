"""The cudaq-rt wheel built from this build tree (python/bundle_native.py), installed offline into
a fresh venv that sees nothing of the build: it imports the runtime it carries, which finds its
bridges and shipped units beside it and every library it needs in the wheel or the system's C
and C++ runtimes (NVRTC from the CUDA Toolkit here, from NVIDIA's wheel where that is
installed); it opens, verifies and refuses packages with the C API's messages, and says "no GPU"
as cudaq-rt-run does.

Environment (tests/CMakeLists.txt): CUDAQ_RT_BUILD_DIR, CUDAQ_RT_PACK, CUDAQ_RT_RUN,
CUDAQ_RT_EXAMPLE_APP, CUDAQ_RT_LOOPBACK_BRIDGE, CUDAQ_RT_EXPECT_FASTCALL (1: the build made
cudaq_rt._fastcall, and the wheel carries and loads it)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile
from pathlib import Path

ENV = os.environ
PYTHON_DIR = Path(__file__).resolve().parents[2] / "python"

PROBE = r"""
import json, os, sys
import cudaq_rt
from cudaq_rt import _library
fast = _library.fastcall()
out = {"library": cudaq_rt.library_path(), "package": os.path.dirname(cudaq_rt.__file__),
       "fastcall": fast.__file__ if fast is not None else None}
code = cudaq_rt.open_package(sys.argv[1])
out["handlers"] = list(code.handlers)
try:
    cudaq_rt.open_package(sys.argv[1], trust=sys.argv[2])
except cudaq_rt.RefusedError as e:
    out["refused"] = str(e)
try:
    with cudaq_rt.Server(code, bridge="loopback"):
        pass
except cudaq_rt.Error as e:
    out["server"] = [type(e).__name__, str(e)]
print(json.dumps(out))
"""


# What a user's shell has: none of the build's variables, so nothing of the tree is seen.
CLEAN = {k: v for k, v in ENV.items()
         if not k.startswith("CUDAQ_RT_") and k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}


def run(*argv: str | Path, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600,
                          check=False, env=env, cwd=cwd)


class Wheel(unittest.TestCase):
    tmp: Path
    wheel: Path

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = Path(tempfile.mkdtemp(prefix="cudaq_rt_wheel_"))
        source = cls.tmp / "src"
        shutil.copytree(PYTHON_DIR, source,
                        ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
        r = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index",
                "--no-build-isolation", "-w", cls.tmp / "dist", source)
        assert r.returncode == 0, r.stdout + r.stderr
        wheels = list((cls.tmp / "dist").glob("cudaq_rt-*.whl"))
        assert len(wheels) == 1, wheels
        cls.wheel = wheels[0]

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_what_the_wheel_carries(self) -> None:
        self.assertTrue(self.wheel.name.endswith("-py3-none-linux_x86_64.whl"), self.wheel.name)
        names = [n.split("cudaq_rt/", 1)[-1] for n in zipfile.ZipFile(self.wheel).namelist()]
        for carried in ("lib/libcudaq_rt.so.0", "py.typed",
                        "lib/cudaq-rt/bridges/libcudaq_rt_bridge_loopback.so",
                        "lib/cudaq-rt/bridges/libcudaq_rt_bridge_udp.so"):
            self.assertIn(carried, names)
        self.assertTrue(any(n.startswith("lib/cudaq-rt/units/v1/") for n in names))
        # cudaq_rt._fastcall (stable ABI, Python 3.11+) where the build tree has it.
        self.assertEqual("_fastcall.abi3.so" in names, ENV.get("CUDAQ_RT_EXPECT_FASTCALL") == "1")
        self.assertTrue(any(n.startswith("lib/libcurl-") for n in names))
        self.assertFalse(any("libnvrtc" in n or "libcuda.so" in n for n in names))
        print(f"\n{self.wheel.name}: {self.wheel.stat().st_size / 2**20:.1f} MiB, "
              f"{len(names)} files")

    def test_installed_in_a_fresh_venv(self) -> None:
        venv = self.tmp / "venv"
        r = run(sys.executable, "-m", "venv", venv, env=CLEAN)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        python = venv / "bin" / "python"
        r = run(python, "-m", "pip", "install", "--no-index", "--no-deps", self.wheel, env=CLEAN)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                        env=CLEAN).stdout.strip())
        runtime = site / "cudaq_rt" / "lib" / "libcudaq_rt.so.0"
        # Everything it needs resolves in the wheel or the system, but NVRTC (looked for beside
        # NVIDIA's wheel, else loaded by the package from the toolkit).
        ldd = run("ldd", runtime, env={"PATH": ENV["PATH"]})
        missing = [line.strip() for line in ldd.stdout.splitlines() if "not found" in line]
        self.assertEqual([m for m in missing if not m.startswith("libnvrtc.so.13")], [],
                         ldd.stdout)
        for line in ldd.stdout.splitlines():
            if "=>" in line and "/build" in line:
                self.fail(f"the installed runtime resolves into a build tree: {line}")

        package = self.tmp / "example.cudaqpkg"
        r = run(ENV["CUDAQ_RT_PACK"], ENV["CUDAQ_RT_EXAMPLE_APP"], "--bridge", "loopback",
                ENV["CUDAQ_RT_LOOPBACK_BRIDGE"], "-n", "example", "-o", self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        key = self.tmp / "k.pub"
        r = run("sh", "-c", f"openssl genpkey -algorithm ed25519 | openssl pkey -pubout > {key}")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run(python, "-c", PROBE, package, key, env=CLEAN, cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(Path(out["library"]), runtime)
        self.assertTrue(out["package"].startswith(str(venv)), out["package"])
        self.assertIn("sum_i32", out["handlers"])
        if ENV.get("CUDAQ_RT_EXPECT_FASTCALL") == "1":
            self.assertEqual(Path(out["fastcall"]), site / "cudaq_rt" / "_fastcall.abi3.so")
        self.assertEqual(out["refused"], f"'{package}': not signed: no signature in signatures/ "
                                         "(cudaq-rt-pack or cudaq-rt-link --sign KEY signs a "
                                         "package)")
        if not Path("/dev/nvidia0").exists():
            kind, message = out["server"]
            self.assertEqual(kind, "NoGpuError")
            r = run(ENV["CUDAQ_RT_RUN"], package, "--call", "echo")
            self.assertIn(message, r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
