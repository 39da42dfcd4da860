#!/usr/bin/python3
"""Integration tests of package aliases (cudaq-rt-pack --alias NAME=HANDLER) and of handlers
exported with CUDA-Q's one-argument macro: what the manifest records, what --list shows, every
refusal, a link that keeps them; and cudaq-rt-run refusing a dispatch kernel the package does not
export, on any machine.

Environment (set by ctest): CUDAQ_RT_PACK, CUDAQ_RT_LINK, CUDAQ_RT_RUN, NVCC, CUDAQ_RT_INCLUDE,
CUDAQ_RT_SCHEMA.
"""
import json
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (INCLUDE, LINK, NVCC, PACK, RUN, SCHEMA_PATH, check, fnv1a32, run,  # noqa: E402
                     validate_schema)

ROOT = os.path.normpath(os.path.join(HERE, "../.."))
FLAGS = ["-rdc=true", "-gencode", "arch=compute_80,code=[sm_80,lto_80]", "-I" + INCLUDE,
         "-std=c++17", "-Xcompiler", "-fPIC"]
# Two C identifiers with one FNV-1a 32-bit hash (0x594f30f6), found by search.
COLLIDING = ("w673879", "w1180600")
RPC_ID = 0x191B6322  # FNV-1a("rpc_increment"), what CUDA-Q's tests send


class AliasTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cudaq-rt-alias-test.")
        cls.schema = validate_schema.load(SCHEMA_PATH)
        collide = os.path.join(cls.tmp, "collide.cu")
        with open(collide, "w") as f:
            f.write('#include "cudaq_rt/exports.h"\n'
                    "static __device__ int h(const void *, void *, uint32_t, uint32_t, uint32_t *r)"
                    " { *r = 0; return 0; }\n"
                    f"CUDAQ_RT_EXPORT_HANDLER(h, {COLLIDING[0]});\n")
        cls.rpc = cls.path("rpc_increment.o")
        cls.collide = cls.path("collide.o")
        cls.dispatcher = cls.path("dispatcher.o")
        for src, out in ((os.path.join(ROOT, "examples/cudaq_compat/rpc_increment.cu"), cls.rpc),
                         (collide, cls.collide),
                         (os.path.join(HERE, "pack_inputs/dispatcher.cu"), cls.dispatcher)):
            check([NVCC, *FLAGS, "-c", src, "-o", out])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def path(cls, name):
        return os.path.join(cls.tmp, name)

    def pack(self, name, *args):
        out = self.path(name)
        os.makedirs(out, exist_ok=True)
        return run([PACK, *args, "--name", name, "-o", out]), os.path.join(out, name + ".cudaqpkg")

    def refused(self, message, *args):
        r, pkg = self.pack("refused", *args)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stderr, f"cudaq-rt-pack: error: {message}\n")
        self.assertFalse(os.path.exists(pkg))
        self.assertEqual(os.listdir(self.path("refused")), [])

    def test_one_argument_export_and_alias(self):
        r, pkg = self.pack("rpc", self.rpc, "--alias", "rpc_increment=rpc_increment_handler")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(pkg, "manifest.json")) as f:
            m = json.load(f)
        self.assertEqual(validate_schema.validate(self.schema, m), [])
        handlers = [(e["name"], e["function_id"]) for e in m["exports"] if e["kind"] == "handler"]
        self.assertEqual(handlers, [("rpc_increment_handler", fnv1a32("rpc_increment_handler"))])
        self.assertEqual(m["aliases"], [{"name": "rpc_increment", "handler": "rpc_increment_handler",
                                         "function_id": RPC_ID}])
        self.assertEqual(fnv1a32("rpc_increment"), RPC_ID)
        listing = check([PACK, "--list", pkg])
        self.assertIn("aliases:\n  rpc_increment -> rpc_increment_handler  function_id "
                      "0x191b6322\n", listing)

        # A link keeps them (it rewrites the manifest), and the tampered record is refused.
        env = dict(os.environ, CUDAQ_RT_CACHE_DIR=self.path("cache"))
        check([LINK, pkg, "--arch", "sm_80"], env=env)
        with open(os.path.join(pkg, "manifest.json")) as f:
            linked = json.load(f)
        self.assertEqual(linked["aliases"], m["aliases"])
        self.assertEqual(len(linked["links"]), 1)
        self.assertEqual(validate_schema.validate(self.schema, linked), [])
        linked["aliases"][0]["function_id"] = 1
        with open(os.path.join(pkg, "manifest.json"), "w") as f:
            json.dump(linked, f)
        r = run([PACK, "--list", pkg])
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr,
                         f"cudaq-rt-pack: error: '{pkg}/manifest.json': aliases[0]: function_id 0x1 "
                         "is not FNV-1a of 'rpc_increment' (0x191b6322)\n")

    def test_no_aliases_no_key(self):
        r, pkg = self.pack("plain", self.rpc)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(pkg, "manifest.json")) as f:
            self.assertNotIn("aliases", json.load(f))

    def test_refusals(self):
        h = "rpc_increment_handler"
        self.refused("alias 'rpc_increment=nope': no handler 'nope' is exported",
                     self.rpc, "--alias", "rpc_increment=nope")
        self.refused(f"alias 'a={h}': the wire name 'a' is given twice (for '{h}' and '{h}')",
                     self.rpc, "--alias", f"a={h}", "--alias", f"a={h}")
        self.refused(f"alias '{h}={h}': the wire name '{h}' is already the name of a handler "
                     "export", self.rpc, "--alias", f"{h}={h}")
        self.refused(f"alias '{COLLIDING[1]}={h}': the wire name '{COLLIDING[1]}' has function_id "
                     f"0x594f30f6, which handler '{COLLIDING[0]}' already answers (FNV-1a "
                     "collision)", self.rpc, self.collide, "--alias", f"{COLLIDING[1]}={h}")
        self.refused(f"alias '{COLLIDING[1]}={h}': the wire names '{COLLIDING[0]}' and "
                     f"'{COLLIDING[1]}' have the same function_id 0x594f30f6 (FNV-1a collision)",
                     self.rpc, "--alias", f"{COLLIDING[0]}={h}", "--alias",
                     f"{COLLIDING[1]}={h}")
        self.refused(f"alias '9lives={h}': the wire name '9lives' is not a C identifier",
                     self.rpc, "--alias", f"9lives={h}")
        self.refused("alias 'rpc_increment': expected NAME=HANDLER", self.rpc, "--alias",
                     "rpc_increment")
        self.refused("alias 'k=test_custom_dispatch': 'test_custom_dispatch' is a dispatch-kernel, "
                     "not a handler", self.rpc, "--dispatcher", self.dispatcher, "--alias",
                     "k=test_custom_dispatch")

    def test_list_takes_no_alias(self):
        r = run([PACK, "--list", self.rpc, "--alias", "a=rpc_increment_handler"])
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr, "cudaq-rt-pack: error: --list takes one package or binary and "
                                   "no other inputs or aliases\n"
                                   "Run 'cudaq-rt-pack --help' for usage.\n")

    def test_run_refuses_a_dispatch_kernel_the_package_lacks(self):
        # Said before any GPU work, so the same on a machine without one.
        r, pkg = self.pack("kernels", self.rpc, "--dispatcher", self.dispatcher)
        self.assertEqual(r.returncode, 0, r.stderr)
        env = dict(os.environ, CUDAQ_RT_CACHE_DIR=self.path("cache"))
        r = run([RUN, pkg, "--dispatcher", "no_such_kernel", "--call", "rpc_increment_handler"],
                env=env)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr, f"cudaq-rt-run: error: '{pkg}': no dispatch kernel "
                                   "'no_such_kernel' in the package (it exports "
                                   "test_custom_dispatch; 'builtin' is the unified kernel, 'warp' the "
                                   "warp-wide one)\n")


if __name__ == "__main__":
    unittest.main(verbosity=2)
