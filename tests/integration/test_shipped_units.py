#!/usr/bin/python3
"""The units the build ships (lib/cudaq-rt/units: the built-in dispatchers with the installed
bridges' hooks, compiled per TU for the common archs): a per-TU link with an empty cache takes the
dispatcher's unit from them and compiles only the application's, and gets the cubin it would have
compiled; a corrupt shipped unit is compiled instead.

Environment (set by ctest): CUDAQ_RT_PACK, CUDAQ_RT_LINK, CUDAQ_RT_EXAMPLE_APP, CUDAQ_RT_UNITS
(the build's units directory), CUDAQ_RT_BRIDGE_DIR (the build's bridges).
"""
import glob
import json
import os
import shutil
import tempfile
import unittest

from harness import LINK, PACK, cache_env, check

APP = os.environ["CUDAQ_RT_EXAMPLE_APP"]
UNITS = os.environ["CUDAQ_RT_UNITS"]
BRIDGES = os.environ["CUDAQ_RT_BRIDGE_DIR"]


class ShippedUnitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cudaq-rt-units-test.")
        check([PACK, APP, "-o", os.path.join(cls.tmp, "pkgs")])
        cls.pkg = glob.glob(os.path.join(cls.tmp, "pkgs", "*.cudaqpkg"))[0]
        cls.n = 0

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def link(self, archs, **env):
        type(self).n += 1
        cache = env.pop("cache", None) or os.path.join(self.tmp, f"cache{self.n}")
        out = check([LINK, self.pkg, "-a", archs, "--lto", "per-tu", "--no-store", "--json"],
                    env=cache_env(cache, **env))
        doc = json.loads(out)
        return cache, {a["arch"]: a for a in doc["archs"]}

    @staticmethod
    def sources(arch):
        return [u["source"] for u in arch["units"]]

    def test_a_cold_link_compiles_only_the_application(self):
        cache, shipped = self.link("sm_80,sm_90,sm_100,sm_120")
        _, compiled = self.link("sm_80,sm_90,sm_100,sm_120", CUDAQ_RT_NO_SHIPPED_UNITS="1")
        for name, a in shipped.items():
            with self.subTest(arch=name):
                self.assertEqual(self.sources(a), ["shipped"] + ["compiled"] * 4)
                self.assertEqual(self.sources(compiled[name]), ["compiled"] * 5)
                self.assertEqual(a["cubin"]["digest"], compiled[name]["cubin"]["digest"])
        # Copied into the caller's cache: the next link finds it there.
        _, again = self.link("sm_90", cache=cache)
        self.assertEqual(again["sm_90"]["source"], "cache")
        _, fresh_module = self.link("sm_90", cache=cache, CUDAQ_RT_LTO="per-tu",
                                    CUDAQ_RT_NO_SHIPPED_UNITS="1")
        self.assertEqual(fresh_module["sm_90"]["source"], "cache")

    def test_the_warp_dispatcher_and_an_arch_not_shipped(self):
        _, warp = self.link("sm_90", CUDAQ_RT_NO_SHIPPED_UNITS="0")
        self.assertEqual(self.sources(warp["sm_90"])[0], "shipped")
        type(self).n += 1
        out = check([LINK, self.pkg, "-a", "sm_90", "--dispatcher", "warp", "--lto", "per-tu",
                     "--no-store", "--json"],
                    env=cache_env(os.path.join(self.tmp, f"cache{self.n}")))
        self.assertEqual(json.loads(out)["archs"][0]["units"][0]["source"], "shipped")
        _, other = self.link("sm_86")
        self.assertEqual(self.sources(other["sm_86"])[0], "compiled")

    def test_a_corrupt_shipped_unit_is_compiled(self):
        root = os.path.join(self.tmp, "install")
        shutil.copytree(BRIDGES, os.path.join(root, "bridges"))
        shutil.copytree(UNITS, os.path.join(root, "units"))
        for entry in glob.glob(os.path.join(root, "units", "v1", "??", "*")):
            with open(entry, "r+b") as f:
                f.seek(-50, os.SEEK_END)
                b = f.read(1)
                f.seek(-50, os.SEEK_END)
                f.write(bytes([b[0] ^ 1]))
        _, good = self.link("sm_90")
        _, bad = self.link("sm_90", CUDAQ_RT_BRIDGE_PATH=os.path.join(root, "bridges"))
        self.assertEqual(self.sources(bad["sm_90"])[0], "compiled")
        self.assertEqual(bad["sm_90"]["cubin"]["digest"], good["sm_90"]["cubin"]["digest"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
