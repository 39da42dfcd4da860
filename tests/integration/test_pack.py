#!/usr/bin/python3
"""Integration tests of cudaq-rt-pack: the real tool on real binaries that nvcc builds here.

Environment (set by ctest): CUDAQ_RT_PACK (the tool), NVCC, CUDAQ_RT_INCLUDE (libdispatch's
include directory), CUDAQ_RT_SCHEMA (schemas/manifest.schema.json).
"""
import concurrent.futures
import json
import os
import re
import shutil
import stat
import struct
import subprocess
import tempfile
import time
import unittest

from harness import (manifest_blobs, read_blob, HANDLERS, INCLUDE, NVCC, PACK, SCHEMA_PATH, check, elf_sections, fnv1a32,
                     read, run, sha256, sha256_file, validate_schema)

HERE = os.path.dirname(os.path.abspath(__file__))
INPUTS = os.path.join(HERE, "pack_inputs")

DEVICE_FLAGS = ["-rdc=true", "-gencode", "arch=compute_80,code=[sm_80,lto_80]", "-I" + INCLUDE,
                "-std=c++17", "-Xcompiler", "-fPIC"]
FLAG_ZSTD = 0x8000
EXAMPLE_HANDLERS = {"sum_i32", "axpy_f32", "parity", "echo"}


class PackTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.schema = validate_schema.load(SCHEMA_PATH)
        cls.tmp = tempfile.mkdtemp(prefix="cudaq-rt-pack-test.")
        t = cls.path
        h = lambda name: os.path.join(HANDLERS, name)  # noqa: E731
        i = lambda name: os.path.join(INPUTS, name)  # noqa: E731
        dc = lambda src, out, *extra: [NVCC, *DEVICE_FLAGS, *extra, "-c", src, "-o", t(out)]  # noqa: E731
        # Independent compiles, two at a time (nvcc is slow; CI machines are small).
        first = [
            dc(h("arith.cu"), "arith.o"),
            dc(h("decode.cu"), "decode.o"),
            dc(h("bits.cu"), "bits.o"),
            dc(h("arith.cu"), "arith_nocompress.o", "--no-compress"),
            [NVCC, *DEVICE_FLAGS, "-fatbin", h("arith.cu"), "-o", t("arith.fatbin")],
            [NVCC, "-rdc=true", "-gencode", "arch=compute_80,code=sm_80", "-I" + INCLUDE,
             "-c", i("nolto.cu"), "-o", t("nolto.o")],
            dc(i("dispatcher.cu"), "dispatcher.o"),
            dc(i("bridge.cu"), "bridge.o"),
            dc(i("clash_a.cu"), "clash_a.o"),
            dc(i("clash_b.cu"), "clash_b.o"),
            dc(i("collide.cu"), "collide.o"),
            [NVCC, "-gencode", "arch=compute_80,code=sm_80", "-I" + INCLUDE, h("arith.cu"),
             h("main.cpp"), "-o", t("app_nordc")],
            ["c++", h("main.cpp"), "-o", t("app_nodevice")],
            ["cc", "-c", i("empty_relfatbin.S"), "-o", t("empty_relfatbin.o")],
            ["cc", "-c", i("tiny_container.S"), "-o", t("tiny.o")],
        ]
        objs = [t("arith.o"), t("decode.o"), t("bits.o")]
        link = ["-rdc=true", "-gencode", "arch=compute_80,code=[sm_80,lto_80]"]
        second = [
            [NVCC, *link, *objs, h("main.cpp"), "-o", t("app")],
            [NVCC, *link, "-shared", "-Xcompiler", "-fPIC", *objs, "-o", t("libhandlers.so")],
            ["ar", "rcs", t("libhandlers.a"), *objs],
            ["ar", "rcs", t("libclash.a"), t("clash_a.o"), t("clash_b.o")],
        ]
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as ex:
            list(ex.map(check, first))
            list(ex.map(check, second))
        # Members of one name (ar q appends, it does not replace): the same code twice, and
        # different code under one name.
        for d, obj in (("one", "arith.o"), ("two", "arith.o"), ("three", "arith_nocompress.o")):
            os.mkdir(t(d))
            shutil.copy(t(obj), t(f"{d}/same.o"))
        check(["ar", "qc", t("libsame.a"), t("one/same.o"), t("two/same.o")])
        check(["ar", "qc", t("libsamediff.a"), t("one/same.o"), t("three/same.o")])
        shutil.copy(t("app"), t("app_stripped"))
        check(["strip", t("app_stripped")])
        with open(t("notes.txt"), "w") as f:
            f.write("not a binary\n")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def path(cls, name):
        return os.path.join(cls.tmp, name)

    def fresh_dir(self):
        return tempfile.mkdtemp(dir=self.tmp, prefix="out.")

    def read(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()

    def write(self, name, data):
        with open(self.path(name), "wb") as f:
            f.write(data)
        return self.path(name)

    def relfatbin(self, name):
        data = self.read(name)
        off, size = elf_sections(data)["__nv_relfatbin"]
        return data, off, size

    # What every successful pack must satisfy: exit 0, a package that validates against the
    # schema, every container's blob at blobs/sha256/<hex> with that digest, nothing else there,
    # and no temporary directory left beside it.
    def pack(self, *args, name=None):
        out = self.fresh_dir()
        cmd = [PACK, "-o", out, *args] + (["-n", name] if name else [])
        r = run(cmd)
        self.assertEqual(r.returncode, 0, f"{cmd}\n{r.stderr}")
        self.assertNotIn("error", r.stderr)
        entries = os.listdir(out)
        self.assertEqual(len(entries), 1, entries)
        self.assertTrue(entries[0].endswith(".cudaqpkg"), entries)
        pkg = os.path.join(out, entries[0])
        with open(os.path.join(pkg, "manifest.json")) as f:
            m = json.load(f)
        self.assertEqual(validate_schema.validate(self.schema, m), [])
        self.assertEqual(entries[0], m["name"] + ".cudaqpkg")
        blobs = manifest_blobs(pkg)
        self.assertEqual(blobs, sorted(c["digest"][len("sha256:"):] for c in m["containers"]))
        for c in m["containers"]:
            self.assertEqual(len(read_blob(pkg, c["digest"])), c["size"])  # checks the digest
        self.assertEqual(sorted(os.listdir(pkg)), ["blobs", "index.json", "manifest.json", "oci-layout"])
        m["_dir"], m["_stderr"] = pkg, r.stderr
        return m

    # What every failure must satisfy: the exit status, one `cudaq-rt-pack: error: 'FILE': ...`
    # line holding every keyword, and an output directory left empty.
    def pack_fails(self, args, subject, keywords, status=1, prefix=()):
        out = self.fresh_dir()
        cmd = [*prefix, PACK, "-o", out, *args]
        r = run(cmd)
        self.assertEqual(r.returncode, status, f"{cmd}\n{r.stderr}")
        self.assertEqual(r.stdout, "")
        errors = [l for l in r.stderr.splitlines() if l.startswith("cudaq-rt-pack: error: ")]
        self.assertEqual(len(errors), 1, r.stderr)
        line = errors[0]
        if subject is not None:
            self.assertTrue(line.startswith(f"cudaq-rt-pack: error: '{subject}': "), line)
        for k in keywords:
            self.assertIn(k, line)
        self.assertEqual(os.listdir(out), [], "a failed run left output behind")
        return line

    def assert_example_exports(self, m, sources=None):
        handlers = {e["name"]: e for e in m["exports"] if e["kind"] == "handler"}
        self.assertEqual(set(handlers), EXAMPLE_HANDLERS)
        for name, e in handlers.items():
            self.assertEqual(e["function_id"], fnv1a32(name), name)
            self.assertEqual(e["symbol"], "cudaq_rt_handler__" + name)
            self.assertEqual(e["role"], "application")
            self.assertIs(e.get("direct"), True, name)  # record version 2
            if sources is not None:
                self.assertEqual(e["sources"], sources)

    def assert_rdc_entries(self, c, compression="zstd"):
        self.assertEqual(sorted(e["kind"] for e in c["entries"]), ["cubin", "ltoir"])
        for e in c["entries"]:
            self.assertEqual(e["arch"], 80)
            self.assertEqual(e["compression"], compression)
            self.assertEqual(e["kind_code"], {"cubin": 2, "ltoir": 8}[e["kind"]])

    # --- inputs of every kind -----------------------------------------------------------------

    def test_the_same_inputs_anywhere_pack_to_the_same_bytes(self):
        # Reproducible packages: two copies of the inputs in two directories, packed from two
        # working directories into two output directories, at two times: every file the same.
        trees = []
        for k in ("one", "two"):
            d = tempfile.mkdtemp(dir=self.tmp, prefix=f"repro-{k}.")
            os.makedirs(os.path.join(d, "in", "deep"))
            for n in ("app", "arith.o"):
                shutil.copy(self.path(n), os.path.join(d, "in", "deep" if k == "two" else "", n))
            where = os.path.join(d, "in", "deep" if k == "two" else "")
            check([PACK, "-o", os.path.join(d, "out"), "-n", "r", os.path.join(where, "app"),
                   "arith.o"], cwd=where)
            pkg = os.path.join(d, "out", "r.cudaqpkg")
            trees.append({os.path.relpath(os.path.join(r, f), pkg): read(os.path.join(r, f))
                          for r, _, fs in os.walk(pkg) for f in fs})
            time.sleep(1.1)
        self.assertEqual(trees[0], trees[1])
        self.assertEqual([s["path"] for s in json.loads(trees[0]["manifest.json"])["sources"]],
                         ["app", "arith.o"])
        # --absolute-paths records where each input was, as it was before.
        m = self.pack("--absolute-paths", self.path("app"))
        self.assertEqual(m["sources"][0]["path"], self.path("app"))

    def test_executable_one_container_per_translation_unit(self):
        m = self.pack(self.path("app"))
        self.assertEqual(m["name"], "app")
        self.assertEqual(m["format_version"], 1)
        self.assertEqual(m["links"], [])
        self.assertEqual(len(m["sources"]), 1)
        src = m["sources"][0]
        self.assertEqual(src["kind"], "executable")
        self.assertEqual(src["path"], "app")  # the file name only, unless asked
        self.assertEqual(src["size"], os.path.getsize(self.path("app")))
        self.assertEqual(src["digest"], sha256_file(self.path("app")))
        self.assertEqual(len(m["containers"]), 3)  # arith, decode, bits
        data, sec_off, sec_size = self.relfatbin("app")
        for k, c in enumerate(m["containers"]):
            self.assertEqual(c["role"], "application")
            self.assert_rdc_entries(c)
            self.assertEqual(len(c["origins"]), 1)
            o = c["origins"][0]
            self.assertEqual((o["source"], o["index"]), (0, k))
            self.assertNotIn("member", o)
            self.assertEqual(o["offset"] % 8, 0)
            # The blob is the section's bytes at that offset, verbatim.
            blob = data[sec_off + o["offset"]:sec_off + o["offset"] + c["size"]]
            self.assertEqual(sha256(blob), c["digest"])
            self.assertEqual(struct.unpack_from("<I", blob)[0], 0xBA55ED50)
        self.assertEqual(m["containers"][0]["origins"][0]["offset"], 0)
        last = m["containers"][-1]
        self.assertLessEqual(last["origins"][0]["offset"] + last["size"], sec_size)
        self.assert_example_exports(m, sources=[0])

    def test_objects_each_translation_unit(self):
        m = self.pack(self.path("arith.o"), self.path("decode.o"), self.path("bits.o"))
        self.assertEqual(m["name"], "arith")
        self.assertEqual([s["kind"] for s in m["sources"]], ["object"] * 3)
        self.assertEqual([c["origins"][0]["source"] for c in m["containers"]], [0, 1, 2])
        for c in m["containers"]:
            self.assert_rdc_entries(c)
        self.assert_example_exports(m)
        by_name = {e["name"]: e["sources"] for e in m["exports"]}
        self.assertEqual(by_name, {"sum_i32": [0], "axpy_f32": [0], "parity": [1], "echo": [1]})

    def test_object_and_executable_share_containers(self):
        m = self.pack(self.path("arith.o"), self.path("app"))
        self.assertEqual(len(m["containers"]), 3)
        arith = m["containers"][0]
        self.assertEqual([(o["source"], o["index"]) for o in arith["origins"]], [(0, 0), (1, 0)])
        for c in m["containers"][1:]:
            self.assertEqual([o["source"] for o in c["origins"]], [1])
        by_name = {e["name"]: e["sources"] for e in m["exports"]}
        self.assertEqual(by_name["sum_i32"], [0, 1])
        self.assertEqual(by_name["echo"], [1])
        self.assertEqual(len(manifest_blobs(m["_dir"])), 3)

    def test_shared_library(self):
        app = self.pack(self.path("app"))
        m = self.pack(self.path("libhandlers.so"))
        self.assertEqual(m["name"], "libhandlers")
        self.assertEqual(m["sources"][0]["kind"], "shared-library")
        self.assertEqual([c["digest"] for c in m["containers"]],
                         [c["digest"] for c in app["containers"]])
        self.assert_example_exports(m)

    def test_stripped_executable_keeps_exports(self):
        sections = elf_sections(self.read("app_stripped"))
        self.assertNotIn(".symtab", sections)
        self.assertIn(".cudaq_rt_exports", sections)
        app = self.pack(self.path("app"))
        m = self.pack(self.path("app_stripped"))
        self.assertEqual([c["digest"] for c in m["containers"]],
                         [c["digest"] for c in app["containers"]])
        self.assert_example_exports(m)

    def test_static_archive_members_named(self):
        m = self.pack(self.path("libhandlers.a"))
        self.assertEqual(m["sources"][0]["kind"], "archive")
        self.assertEqual([c["origins"][0]["member"] for c in m["containers"]],
                         ["arith.o", "decode.o", "bits.o"])
        self.assertEqual([c["origins"][0]["index"] for c in m["containers"]], [0, 0, 0])
        self.assert_example_exports(m, sources=[0])

    def test_archive_members_of_one_name(self):
        # Identical code under one member name twice is one set of exports, not a clash; each
        # member is named by its place among those of its name, as `ar N` counts them.
        m = self.pack(self.path("libsame.a"))
        self.assertEqual([o["member"] for o in m["containers"][0]["origins"]],
                         ["same.o#1", "same.o#2"])
        self.assertEqual(len(m["containers"]), 1)
        self.assertEqual({e["name"]: e["sources"] for e in m["exports"]},
                         {"sum_i32": [0], "axpy_f32": [0]})
        lib = self.path("libsamediff.a")
        self.pack_fails([lib], f"{lib}(same.o#2)",
                        [f"handler 'axpy_f32' is also exported by '{lib}(same.o#1)' with "
                         "different code"])
        # Names that do not repeat stay as they are.
        m = self.pack(self.path("libhandlers.a"))
        self.assertEqual([c["origins"][0]["member"] for c in m["containers"]],
                         ["arith.o", "decode.o", "bits.o"])

    def test_raw_fatbin(self):
        obj = self.pack(self.path("arith.o"))
        m = self.pack(self.path("arith.fatbin"))
        self.assertEqual(m["sources"][0]["kind"], "fatbin")
        self.assertEqual(len(m["containers"]), 1)
        self.assertEqual(m["containers"][0]["size"], os.path.getsize(self.path("arith.fatbin")))
        self.assertEqual(m["containers"][0]["digest"], obj["containers"][0]["digest"])
        self.assertEqual(m["exports"], [])  # a fatbin carries no host-side export records

    def test_compression_zstd_and_none(self):
        # Packed apart: the same source stored two ways is two different containers, and one
        # package holding both would define each handler twice (a clash, see below).
        (zstd,) = self.pack(self.path("arith.o"))["containers"]
        (plain,) = self.pack(self.path("arith_nocompress.o"))["containers"]
        self.assertNotEqual(zstd["digest"], plain["digest"])
        self.assert_rdc_entries(zstd, "zstd")
        self.assert_rdc_entries(plain, "none")
        for e in zstd["entries"]:
            self.assertTrue(e["flags"] & FLAG_ZSTD)
            self.assertGreater(e["compressed_size"], 0)
            self.assertLessEqual(e["compressed_size"], e["payload_size"])
            self.assertGreater(e["uncompressed_size"], e["compressed_size"])
        for e in plain["entries"]:
            self.assertFalse(e["flags"] & FLAG_ZSTD)
            self.assertEqual((e["compressed_size"], e["uncompressed_size"]), (0, 0))
        # The uncompressed payloads are as large as the compressed ones say they expand to.
        sizes = lambda c: {e["kind"]: e for e in c["entries"]}  # noqa: E731
        for kind in ("cubin", "ltoir"):
            self.assertLessEqual(sizes(zstd)[kind]["uncompressed_size"],
                                 sizes(plain)[kind]["payload_size"])
        self.pack_fails([self.path("arith.o"), self.path("arith_nocompress.o")],
                        self.path("arith_nocompress.o"), ["also exported by", "different code"])

    def test_blobs_are_stored_zstd_compressed_where_that_pays(self):
        # nvcc's own compression leaves little for a second one; its uncompressed container
        # shrinks, and is kept as one zstd frame under the frame's digest.
        m = self.pack(self.path("arith_nocompress.o"))
        (c,) = m["containers"]
        self.assertEqual(m["format_version"], 2)
        (s,) = m["stored"]
        self.assertEqual(s["digest"], c["digest"])
        self.assertEqual(s["encoding"], "zstd")
        frame = os.path.join(m["_dir"], "blobs", "sha256", s["stored_digest"][7:])
        self.assertEqual(sha256_file(frame), s["stored_digest"])
        self.assertEqual(os.path.getsize(frame), s["stored_size"])
        self.assertLess(s["stored_size"], c["size"] * 3 // 4)
        self.assertFalse(os.path.exists(os.path.join(m["_dir"], "blobs", "sha256", c["digest"][7:])))
        # The zstd tool, an independent decoder, gives the container back.
        unpacked = subprocess.run(["zstd", "-dc", frame], check=True, stdout=subprocess.PIPE).stdout
        self.assertEqual(sha256(unpacked), c["digest"])
        # Its OCI layer is the frame, typed +zstd.
        with open(os.path.join(m["_dir"], "index.json")) as f:
            image_digest = json.load(f)["manifests"][0]["digest"]
        with open(os.path.join(m["_dir"], "blobs", "sha256", image_digest[7:])) as f:
            layers = json.load(f)["layers"]
        self.assertEqual([(l["mediaType"], l["digest"], l["size"]) for l in layers],
                         [("application/vnd.cudaq-rt.container.v1+zstd", s["stored_digest"],
                           s["stored_size"])])
        self.assertEqual(layers[0]["annotations"]["io.cudaq-rt.uncompressed-digest"], c["digest"])
        r = run([PACK, "--list", m["_dir"]])
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        # nvcc's compressed container gains less than a sixteenth: stored as it is.
        z = self.pack(self.path("arith.o"))
        self.assertNotIn("stored", z)
        self.assertEqual(z["format_version"], 1)
        # --no-compress: every blob as it is, format 1, the same container digest.
        plain = self.pack("--no-compress", self.path("arith_nocompress.o"))
        self.assertEqual(plain["format_version"], 1)
        self.assertNotIn("stored", plain)
        self.assertEqual(plain["containers"], m["containers"])
        self.assertEqual(os.path.getsize(os.path.join(plain["_dir"], "blobs", "sha256",
                                                      c["digest"][7:])), c["size"])

    def test_roles_bridge_and_dispatcher(self):
        m = self.pack(self.path("app"), "--bridge", "loop", self.path("bridge.o"),
                      "--dispatcher", self.path("dispatcher.o"))
        self.assertEqual(m["name"], "app")
        roles = [(c["role"], c.get("bridge"), c["origins"][0]["source"]) for c in m["containers"]]
        self.assertEqual(roles, [("application", None, 0)] * 3 +
                         [("bridge", "loop", 1), ("dispatcher", None, 2)])
        kernels = [e for e in m["exports"] if e["kind"] == "dispatch-kernel"]
        self.assertEqual(kernels, [{"name": "test_custom_dispatch", "kind": "dispatch-kernel",
                                    "function_id": 0, "symbol": "test_custom_dispatch",
                                    "role": "dispatcher", "sources": [2]}])
        self.assertEqual(len(m["exports"]), 5)

    def test_a_bridges_hook_sets_are_exports_apart(self):
        # The installed loopback bridge's code exports the lone forms' hooks, the unified and
        # the warp kernel's: a bridge-hooks entry each (no symbol of the module), their source the
        # bridge's, the exports sorted by name.
        lib = os.path.join(os.path.dirname(PACK), "..", "lib", "cudaq-rt", "bridges",
                           "libcudaq_rt_bridge_loopback.so")
        m = self.pack(self.path("app"), "--bridge", "loopback", lib)
        hooks = [e for e in m["exports"] if e["kind"] == "bridge-hooks"]
        self.assertEqual(hooks, [{"name": name, "kind": "bridge-hooks", "function_id": 0,
                                  "symbol": name, "role": "bridge", "sources": [1]}
                                 for name in ("lone", "warp_lone")])
        names = [e["name"] for e in m["exports"]]
        self.assertEqual(names, sorted(names))

    def test_dispatcher_needs_a_dispatch_kernel(self):
        self.pack_fails([self.path("app"), "--dispatcher", self.path("bridge.o")],
                        self.path("bridge.o"),
                        ["exports no dispatch kernel", "CUDAQ_RT_EXPORT_DISPATCH_KERNEL"])

    def test_one_container_cannot_play_two_roles(self):
        self.pack_fails([self.path("app"), "--bridge", "b", self.path("arith.o")],
                        self.path("arith.o"),
                        ["container 0 at offset 0x0", "also packed as application code",
                         "two roles"])

    def test_translation_unit_without_ltoir_warns(self):
        m = self.pack(self.path("nolto.o"))
        (c,) = m["containers"]
        self.assertEqual([(e["kind"], e["arch"]) for e in c["entries"]], [("cubin", 80)])
        warnings = [l for l in m["_stderr"].splitlines() if "warning" in l]
        self.assertEqual(len(warnings), 1, m["_stderr"])
        self.assertRegex(warnings[0], r"^cudaq-rt-pack: warning: '" + re.escape(self.path("nolto.o"))
                         + r"': container 0 \(sha256:[0-9a-f]{12}\) has no LTO-IR: it can only be"
                         r" linked for sm_80 from its cubins; build it with -gencode "
                         r"arch=compute_NN,code=lto_NN$")
        self.assertNotIn("warning", self.pack(self.path("arith.o"))["_stderr"])

    def test_name_option(self):
        m = self.pack(self.path("app"), name="my-handlers_1.0")
        self.assertTrue(m["_dir"].endswith("/my-handlers_1.0.cudaqpkg"))
        self.pack_fails([self.path("app"), "-n", ".hidden"], ".hidden",
                        ["not a valid package name"])
        self.pack_fails([self.path("app"), "-n", "a/b"], "a/b", ["not a valid package name"])

    def test_verbose_says_what_each_input_gave(self):
        quiet = run([PACK, "-o", self.fresh_dir(), self.path("app")])
        self.assertEqual((quiet.returncode, quiet.stderr), (0, ""))  # stderr is not a terminal
        out = self.fresh_dir()
        r = run([PACK, "-v", "-o", out, self.path("app"), self.path("arith.o")])
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 3, r.stderr)
        self.assertRegex(lines[0], r"^cudaq-rt-pack: note: .*/app: executable, \d+ bytes: "
                                   r"[1-9]\d* container\(s\) \(\d+ bytes\), [1-9]\d* export\(s\)$")
        self.assertRegex(lines[1], r"^cudaq-rt-pack: note: .*/arith.o: ")
        self.assertRegex(lines[2], r"^cudaq-rt-pack: wrote .*\.cudaqpkg: \d+ container\(s\)")

    def test_existing_output_and_force(self):
        out = self.fresh_dir()
        r = run([PACK, "-o", out, "-n", "pkg", self.path("arith.o")])
        self.assertEqual(r.returncode, 0, r.stderr)
        manifest = os.path.join(out, "pkg.cudaqpkg", "manifest.json")
        with open(manifest) as f:
            before = f.read()
        r = run([PACK, "-o", out, "-n", "pkg", self.path("app")])
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.strip(), f"cudaq-rt-pack: error: "
                         f"'{os.path.join(out, 'pkg.cudaqpkg')}': already exists "
                         f"(use --force to replace it)")
        with open(manifest) as f:
            self.assertEqual(f.read(), before)
        self.assertEqual(os.listdir(out), ["pkg.cudaqpkg"])
        r = run([PACK, "-o", out, "-n", "pkg", "--force", self.path("app")])
        self.assertEqual(r.returncode, 0, r.stderr)
        # No temporary or old copy left; the lock that --force shares with cudaq-rt-link stays.
        self.assertEqual(sorted(os.listdir(out)), [".pkg.cudaqpkg.lock", "pkg.cudaqpkg"])
        with open(manifest) as f:
            m = json.load(f)
        self.assertEqual(len(m["containers"]), 3)
        self.assertEqual(validate_schema.validate(self.schema, m), [])
        self.assertEqual(len(manifest_blobs(os.path.join(out, "pkg.cudaqpkg"))), 3)

    def test_missing_output_directory(self):
        # Made as `mkdir -p` would, as cmake -B and nvcc -o users expect ...
        missing = os.path.join(self.tmp, "no-such-dir", "deeper")
        r = run([PACK, "-o", missing, self.path("arith.o")])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.isdir(os.path.join(missing, "arith.cudaqpkg")))
        # ... and taken back when the pack fails.
        again = os.path.join(self.tmp, "other-dir", "deeper")
        r = run([PACK, "-o", again, os.path.join(self.tmp, "no-such-input.o")])
        self.assertEqual(r.returncode, 1)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "other-dir")))

    # --- --list ---------------------------------------------------------------------------------

    def test_list_binary_text(self):
        r = run([PACK, "--list", self.path("app")])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        lines = r.stdout.splitlines()
        self.assertRegex(lines[0], r"^" + re.escape(self.path("app")) +
                         r": 1 source\(s\), 3 container\(s\) \(\d+ bytes\), 4 export\(s\), 0 link\(s\)$")
        self.assertIn("archs by kind:  cubin sm_80  ltoir sm_80", lines)
        for name in EXAMPLE_HANDLERS:
            # The example handlers are exported safe to run concurrently (the warp dispatcher),
            # with this cudaq-rt's macros (callable by name: direct).
            self.assertIn(f"  handler {name}  function_id {fnv1a32(name):#x}  application"
                          "  concurrent  direct", lines)
        self.assertEqual(sum(1 for l in lines if re.match(r"^    ltoir sm_80  \d+ bytes zstd", l)), 3)

    def test_list_json_matches_package(self):
        m = self.pack(self.path("app"), "--bridge", "loop", self.path("bridge.o"))
        r = run([PACK, "--list", m["_dir"], "--json"])
        self.assertEqual(r.returncode, 0, r.stderr)
        listed = json.loads(r.stdout)
        self.assertEqual(validate_schema.validate(self.schema, listed), [])
        with open(os.path.join(m["_dir"], "manifest.json")) as f:
            self.assertEqual(listed, json.load(f))
        r = run([PACK, "--list", m["_dir"]])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("package app: 2 source(s), 4 container(s)"), r.stdout)
        self.assertIn(" bridge loop  [1]#0@0x0", r.stdout)

    def test_list_json_of_binary_validates(self):
        for name in ("app", "libhandlers.a", "arith.fatbin", "nolto.o"):
            r = run([PACK, "--list", self.path(name), "--json"])
            self.assertEqual(r.returncode, 0, r.stderr)
            listed = json.loads(r.stdout)  # one document, nothing else on stdout
            self.assertEqual(validate_schema.validate(self.schema, listed), [], name)
        self.assertIn("warning", r.stderr)  # nolto.o's warning goes to stderr, not into the JSON

    def test_list_detects_tampered_blob(self):
        m = self.pack(self.path("arith.o"))
        blob = os.path.join(m["_dir"], "blobs", "sha256", m["containers"][0]["digest"][7:])
        os.chmod(blob, 0o644)
        with open(blob, "r+b") as f:
            f.seek(100)
            f.write(b"\xff")
        r = run([PACK, "--list", m["_dir"]])
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"cudaq-rt-pack: error: '{blob}': blob does not match its digest", r.stderr)

    def test_names_are_escaped_in_messages(self):
        # A newline would split the one-line message; escape sequences would be obeyed by the
        # terminal; bytes that are not UTF-8 are shown as such.
        f = os.path.join(os.fsencode(self.tmp), b"no\nsuch\x1b[31m\xff'.o")
        line = self.pack_fails([f], None, [])
        self.assertEqual(line, f"cudaq-rt-pack: error: '{self.tmp}/no\\nsuch\\x1b[31m\\xff\\'.o': "
                         "cannot open: No such file or directory")

    def test_list_escapes_what_a_tampered_manifest_says(self):
        m = self.pack(self.path("libhandlers.a"), "--bridge", "b", self.path("bridge.o"))
        path = os.path.join(m["_dir"], "manifest.json")
        with open(path) as f:
            doc = json.load(f)
        doc["sources"][0]["path"] = "/x\x1b]0;owned\x07\nfake: line\x9b31m"
        doc["containers"][0]["origins"][0]["member"] = "m\x1b[2J.o"
        doc["containers"][3]["bridge"] = "b\rB"
        os.chmod(path, 0o644)
        with open(path, "w") as f:
            json.dump(doc, f)
        # Without its layout, as a package written before layouts were (a layout that no longer
        # names this manifest is refused before anything is listed).
        os.remove(os.path.join(m["_dir"], "index.json"))
        r = run([PACK, "--list", m["_dir"]])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([c for c in r.stdout if ord(c) < 0x20 and c != "\n" or
                          0x7f <= ord(c) < 0xa0], [])
        self.assertIn("  [0] /x\\x1b]0;owned\\x07\\nfake: line\\xc2\\x9b31m  archive, ", r.stdout)
        self.assertIn("  [0](m\\x1b[2J.o)#0@0x0", r.stdout)
        self.assertIn(" bridge b\\rB  [1]#0@0x0", r.stdout)

    def test_list_refuses_what_the_digests_cannot_check(self):
        m = self.pack(self.path("arith.o"))
        path = os.path.join(m["_dir"], "manifest.json")
        os.chmod(path, 0o644)
        with open(path) as f:
            text = f.read()
        blob = os.path.join(m["_dir"], "blobs", "sha256", m["containers"][0]["digest"][7:])

        def listing_fails(doc_text, message):
            with open(path, "w") as f:
                f.write(doc_text)
            r = run([PACK, "--list", m["_dir"]])
            self.assertEqual((r.returncode, r.stdout), (1, ""), r.stdout)
            self.assertEqual(r.stderr, f"cudaq-rt-pack: error: {message}\n")

        # A duplicate key: one reader would take the first "size", another the last.
        size = f'"size": {m["containers"][0]["size"]}'
        self.assertEqual(text.count(size), 1)
        listing_fails(text.replace(size, size + ', "size": 16'),
                      f"'{path}': key 'size' appears twice in one object")
        # A size no blob has, printed as if it were one.
        doc = json.loads(text)
        doc["containers"][0]["size"] = 2**64 - 1
        listing_fails(json.dumps(doc), f"'{blob}': blob is {m['containers'][0]['size']} bytes "
                      f"but the manifest says {2**64 - 1} (the package is corrupt or was "
                      "modified)")
        doc = json.loads(text)
        doc["containers"][0]["entries"][0]["payload_size"] = 2**64 - 1
        e = m["containers"][0]["entries"][0]
        listing_fails(json.dumps(doc), f"'{blob}': entry 0 ({e['kind']} sm_80, "
                      f"{e['payload_size']} bytes) is not what the manifest says of it (the "
                      "manifest was modified)")
        # Two records of one container.
        doc = json.loads(text)
        doc["containers"].append(doc["containers"][0])
        listing_fails(json.dumps(doc), f"'{path}': containers[1].digest: "
                      f"{m['containers'][0]['digest']} is also containers[0]'s: one record per "
                      "container")

    def test_list_refuses_a_blob_of_two_containers(self):
        # A blob whose digest matches, holding two containers: link would hand nvJitLink the
        # first only. The manifest is rewritten to name the doubled blob.
        m = self.pack(self.path("arith.o"))
        c = m["containers"][0]
        old = os.path.join(m["_dir"], "blobs", "sha256", c["digest"][7:])
        with open(old, "rb") as f:
            two = f.read() * 2
        new = os.path.join(m["_dir"], "blobs", "sha256", sha256(two)[7:])
        with open(new, "wb") as f:
            f.write(two)
        path = os.path.join(m["_dir"], "manifest.json")
        with open(path) as f:
            doc = json.load(f)
        doc["containers"][0].update(digest=sha256(two), size=len(two))
        os.chmod(path, 0o644)
        with open(path, "w") as f:
            json.dump(doc, f)
        r = run([PACK, "--list", m["_dir"]])
        self.assertEqual((r.returncode, r.stdout), (1, ""))
        self.assertEqual(r.stderr, f"cudaq-rt-pack: error: '{new}': blob holds 2 containers, "
                         "not one\n")

    # --- scale ----------------------------------------------------------------------------------

    def tiny_archive(self, name, n):
        """An archive of n members, each one distinct container of one cubin entry header (no
        LTO-IR, so every member draws a warning: the warnings are grouped per member)."""
        obj = self.read("tiny.o")
        off, size = elf_sections(obj)["__nv_relfatbin"]
        out = [b"!<arch>\n"]
        for i in range(n):
            member = bytearray(obj)
            struct.pack_into("<I", member, off + 16 + 0x30, i)  # a reserved field: distinct code
            header = (f"m{i}.o/".ljust(16) + "0".ljust(12) + "0".ljust(6) + "0".ljust(6) +
                      "644".ljust(8) + str(len(member)).ljust(10) + "`\n").encode()
            out += [header, bytes(member), b"\n" * (len(member) % 2)]
        return self.write(name, b"".join(out))

    def test_large_archive_in_linear_time(self):
        def seconds(path):
            best = None
            for _ in range(2):
                t0 = time.monotonic()
                r = run([PACK, "--list", path])
                t = time.monotonic() - t0
                self.assertEqual(r.returncode, 0, r.stderr[-2000:])
                best = t if best is None else min(best, t)
            return best
        small, large = 2000, 40000
        t_small = seconds(self.tiny_archive("small.a", small))
        t_large = seconds(self.tiny_archive("large.a", large))
        # Twenty times the members: about twenty times the time if linear, 400 if quadratic.
        self.assertLess(t_large, 2 * (large / small) * t_small + 0.5, (t_small, t_large))

    def test_a_container_claiming_more_than_the_file_fails_before_hashing(self):
        # A sparse 8 GiB fatbin whose header claims more: refused by its header at once, not
        # after the whole file has been hashed (several seconds at any hashing speed).
        f = self.path("huge.fatbin")
        with open(f, "wb") as out:
            out.write(struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 2**40))
            out.truncate(8 << 30)
        try:
            t0 = time.monotonic()
            self.pack_fails([f], f, [f"fatbin: container 0 at offset 0x0 claims {2**40} bytes "
                                     f"but {(8 << 30) - 16} remain"])
            self.assertLess(time.monotonic() - t0, 2.0)
        finally:
            os.remove(f)

    # --- usage errors ---------------------------------------------------------------------------

    def test_usage_errors(self):
        self.pack_fails([], None, ["no input files"], status=2)
        self.pack_fails(["--no-such-option", self.path("app")], None, ["--no-such-option"],
                        status=2)
        line = self.pack_fails(["--no-such\noption", self.path("app")], None, [], status=2)
        self.assertTrue(line.endswith("not expected: --no-such\\noption"), line)
        # With --json, a usage error is a document on stdout too, as every tool's is.
        r = run([PACK, "--json", self.path("app")])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--json goes with --list", r.stderr)
        self.assertEqual(json.loads(r.stdout), {"error": "--json goes with --list",
                                                "exit_status": 2, "format_version": 1})
        self.pack_fails(["--list", self.path("app"), self.path("arith.o")], None,
                        ["--list takes one package or binary"], status=2)
        self.pack_fails(["--bridge", "only-a-name"], None, [], status=2)

    # --- bad input --------------------------------------------------------------------------------

    def test_not_an_elf_file(self):
        f = self.path("notes.txt")
        self.pack_fails([f], f, ["not an ELF file, a static archive or a fatbin"])
        self.pack_fails([self.path("app"), f], f, ["not an ELF file"])

    def test_truncated_elf(self):
        data = self.read("app")
        sec_off, sec_size = elf_sections(data)["__nv_relfatbin"]
        shoff, = struct.unpack_from("<Q", data, 0x28)
        cuts = {"head": 2000,                               # ELF header and a little more
                "section-data": sec_off + sec_size // 2,    # inside __nv_relfatbin
                "section-headers": shoff + 3 * 64 + 10}     # inside the section header table
        for what, n in cuts.items():
            f = self.write(f"app_cut_{what}", data[:n])
            line = self.pack_fails([f], f, ["truncated or malformed ELF file"])
            self.assertRegex(line, r"section (header )?table goes past the end")

    def test_section_past_end_of_file(self):
        data = bytearray(self.read("app"))
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        names = list(elf_sections(bytes(data)))
        k = names.index("__nv_relfatbin")
        struct.pack_into("<Q", data, shoff + k * shentsize + 0x20, len(data))  # sh_size
        f = self.write("app_big_section", bytes(data))
        self.pack_fails([f], f, ["section __nv_relfatbin"])

    def test_no_device_code(self):
        f = self.path("app_nodevice")
        self.pack_fails([f], f, ["no device code", "no __nv_relfatbin section"])

    def test_built_without_rdc(self):
        f = self.path("app_nordc")
        self.assertIn(".nv_fatbin", elf_sections(self.read("app_nordc")))
        self.pack_fails([f], f, ["no __nv_relfatbin section, only .nv_fatbin",
                                 "without relocatable device code", "-rdc=true"])

    def test_empty_section(self):
        f = self.path("empty_relfatbin.o")
        self.assertEqual(elf_sections(self.read("empty_relfatbin.o"))["__nv_relfatbin"][1], 0)
        self.pack_fails([f], f, ["section __nv_relfatbin is empty"])

    def test_container_runs_past_section(self):
        data, sec_off, sec_size = self.relfatbin("app")
        data = bytearray(data)
        m = self.pack(self.path("app"))
        c1 = sec_off + m["containers"][1]["origins"][0]["offset"]
        remain = sec_size - (c1 - sec_off) - 16
        struct.pack_into("<Q", data, c1 + 8, remain + 8)  # fat_size
        f = self.write("app_long_container", bytes(data))
        self.pack_fails([f], f, [f"section __nv_relfatbin: container 1 at offset "
                                 f"{c1 - sec_off:#x} claims {remain + 8} bytes but "
                                 f"{remain} remain"])

    def test_entry_size_overflow(self):
        data, sec_off, sec_size = self.relfatbin("app")
        data = bytearray(data)
        struct.pack_into("<Q", data, sec_off + 16 + 8, 0xFFFFFFFFFFFFFFF0)  # entry 0 payload size
        hdr, = struct.unpack_from("<I", data, sec_off + 16 + 4)
        fat, = struct.unpack_from("<Q", data, sec_off + 8)
        f = self.write("app_entry_overflow", bytes(data))
        self.pack_fails([f], f, ["section __nv_relfatbin: container 0 at offset 0x0: entry at "
                                 f"offset 0x10 claims {0xFFFFFFFFFFFFFFF0} payload bytes but "
                                 f"{fat - hdr} remain"])
        # The same in a raw fatbin, and with a header size that overflows.
        fb = bytearray(self.read("arith.fatbin"))
        struct.pack_into("<I", fb, 16 + 4, 0xFFFFFFF0)
        f = self.write("arith_bad_header.fatbin", bytes(fb))
        self.pack_fails([f], f, ["fatbin: container 0 at offset 0x0: entry at offset 0x10 has "
                                 "header size 4294967280"])

    def test_corrupt_container_magic(self):
        data, sec_off, _ = self.relfatbin("app")
        data = bytearray(data)
        m = self.pack(self.path("app"))
        c2 = m["containers"][2]["origins"][0]["offset"]
        struct.pack_into("<I", data, sec_off + c2, 0x12345678)
        f = self.write("app_bad_magic", bytes(data))
        self.pack_fails([f], f, [f"container 2 at offset {c2:#x}: bad magic 0x12345678"])

    def test_export_clash_different_code(self):
        a, b = self.path("clash_a.o"), self.path("clash_b.o")
        self.pack_fails([a, b], b, [f"handler 'twin' is also exported by '{a}' with different "
                                    "code", "export names must be unique"])
        lib = self.path("libclash.a")
        self.pack_fails([lib], f"{lib}(clash_b.o)",
                        [f"handler 'twin' is also exported by '{lib}(clash_a.o)'"])

    def test_function_id_collision(self):
        self.assertEqual(fnv1a32("glbvs"), fnv1a32("yacxa"))
        f = self.path("collide.o")
        self.pack_fails([f], f, ["handlers 'glbvs'", "'yacxa'", "same function_id 0xa1bc9a4f",
                                 "FNV-1a collision"])

    def test_missing_file(self):
        f = self.path("no-such-file.o")
        self.pack_fails([f], f, ["cannot open", "No such file or directory"])
        self.pack_fails([self.path("app"), f], f, ["cannot open"])

    def test_directory_input(self):
        self.pack_fails([self.tmp], self.tmp, ["is a directory"])
        self.pack_fails(["."], ".", ["is a directory"])

    def test_unreadable_file(self):
        f = self.path("unreadable.o")
        shutil.copy(self.path("arith.o"), f)
        os.chmod(f, 0)
        # Root reads files whatever their mode (and CI runs as root): run the tool as nobody,
        # in a directory nobody may enter, so that only the file's own mode stands in the way.
        prefix = ()
        if os.geteuid() == 0:
            setpriv = shutil.which("setpriv")
            if not setpriv:
                self.skipTest("running as root without setpriv")
            prefix = (setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--")
            if run([*prefix, PACK, "--version"]).returncode != 0:
                self.skipTest("nobody cannot run the tool from where it was built")
            os.chmod(self.tmp, 0o755)
        try:
            self.pack_fails([f], f, ["cannot open", "Permission denied"], prefix=prefix)
        finally:
            os.chmod(f, stat.S_IRUSR | stat.S_IWUSR)


if __name__ == "__main__":
    unittest.main(verbosity=2)
