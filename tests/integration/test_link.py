#!/usr/bin/python3
"""Integration tests of cudaq-rt-link: the real tool links packages that cudaq-rt-pack made from
objects nvcc builds here, with the real nvJitLink.

Environment (set by ctest): CUDAQ_RT_PACK, CUDAQ_RT_LINK (the tools), NVCC, CUDAQ_RT_INCLUDE
(libdispatch's include directory), CUDAQ_RT_SCHEMA (schemas/manifest.schema.json).
Every link runs with CUDAQ_RT_CACHE_DIR set to a directory of the test's own.
"""
import concurrent.futures
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import unittest

from harness import (blob_file, manifest_blobs, read_blob, DEVICE_FLAGS, HANDLERS, LINK, NVCC, PACK, SCHEMA_PATH, cache_env, check,
                     cubin_info, fnv1a32, ltoir_entry_offsets, read, run, sha256, snapshot,
                     validate_schema)

HERE = os.path.dirname(os.path.abspath(__file__))
INPUTS = os.path.join(HERE, "link_inputs")
LOOPBACK_DEVICE = os.path.join(HERE, "..", "..", "bridges", "loopback", "loopback_device.cu")

KERNEL = "cudaq_rt_unified_dispatch"
EXAMPLE_HANDLERS = ["axpy_f32", "echo", "parity", "sum_i32"]
HANDLER_SYMBOLS = ["cudaq_rt_handler__" + h for h in EXAMPLE_HANDLERS]
EM_CUDA = 190


class LinkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.schema = validate_schema.load(SCHEMA_PATH)
        cls.tmp = tempfile.mkdtemp(prefix="cudaq-rt-link-test.")
        t = cls.path
        # bits.cu with one more definition: a change to one translation unit of the app.
        with open(t("bits_changed.cu"), "w") as f:
            f.write(read(os.path.join(HANDLERS, "bits.cu")).decode()
                    + "\n__device__ int cudaq_rt_test_changed = 1;\n")
        compiles = [[NVCC, *DEVICE_FLAGS, *defines, "-c", src, "-o", t(out)]
                    for src, out, *defines in [
            (os.path.join(HANDLERS, "arith.cu"), "arith.o"),
            (os.path.join(HANDLERS, "decode.cu"), "decode.o"),
            (os.path.join(HANDLERS, "bits.cu"), "bits.o"),
            (os.path.join(INPUTS, "unresolved.cu"), "unresolved.o"),
            (os.path.join(INPUTS, "unused_kernel.cu"), "unused_kernel.o"),
            (os.path.join(INPUTS, "hand_export.cu"), "hand_export.o"),
            (os.path.join(INPUTS, "plain_bridge.cu"), "libcudaq_rt_bridge_plain.o"),
            # The loopback bridge's device code exporting the unified kernel's lone hooks only.
            (LOOPBACK_DEVICE, "libcudaq_rt_bridge_unified_lone.o",
             "-DCUDAQ_RT_LOOPBACK_WARP_LONE_EXPORT=0"),
            (t("bits_changed.cu"), "bits_changed.o")]]
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:  # nvcc is slow
            list(ex.map(check, compiles))
        os.mkdir(t("base"))
        check([PACK, "-o", t("base"), "-n", "app", t("arith.o"), t("decode.o"), t("bits.o")])
        check([PACK, "-o", t("base"), "-n", "unresolved", t("unresolved.o")])
        check([PACK, "-o", t("base"), "-n", "extra", t("arith.o"), t("unused_kernel.o")])
        check([PACK, "-o", t("base"), "-n", "changed", t("arith.o"), t("decode.o"),
               t("bits_changed.o")])
        check([PACK, "-o", t("base"), "-n", "nobits", t("arith.o"), t("decode.o")])
        check([PACK, "-o", t("base"), "-n", "hand", t("hand_export.o")])
        cls.base = t("base/app.cudaqpkg")
        cls.base_manifest = json.loads(read(os.path.join(cls.base, "manifest.json")))
        # LTO-IR from a newer toolkit and from another major: arith.o's container with the
        # version in its LTO-IR entry header (+0x18 u16 minor, +0x1A u16 major) raised.
        arith = read_blob(cls.base, cls.base_manifest["containers"][0]["digest"])
        entries = ltoir_entry_offsets(arith)
        assert len(entries) == 1, entries
        cls.ltoir_version = struct.unpack_from("<HH", arith, entries[0] + 0x18)
        minor, major = cls.ltoir_version
        for name, version in (("newer", (minor + 1, major)), ("othermajor", (minor, major + 1))):
            patched = bytearray(arith)
            struct.pack_into("<HH", patched, entries[0] + 0x18, *version)
            with open(t(name + ".fatbin"), "wb") as f:
                f.write(patched)
            check([PACK, "-o", t("base"), t(name + ".fatbin")])
        # One shared link for sm_80 and sm_90 that the read-only tests look at.
        cls.linked_cache = t("linked-cache")
        cls.linked_dir = t("linked")
        os.mkdir(cls.linked_dir)
        cls.linked = shutil.copytree(cls.base, os.path.join(cls.linked_dir, "app.cudaqpkg"))
        r = run([LINK, cls.linked, "--arch", "sm_80,sm_90", "--json"], cache_env(cls.linked_cache))
        if r.returncode != 0:
            raise RuntimeError(f"the shared link failed ({r.returncode}):\n{r.stderr}")
        cls.linked_json = json.loads(r.stdout)
        cls.linked_manifest = json.loads(read(os.path.join(cls.linked, "manifest.json")))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def path(cls, name):
        return os.path.join(cls.tmp, name)

    def fresh(self, name="app"):
        """A copy of a base package in a directory of its own, and a cache directory of its own."""
        d = tempfile.mkdtemp(dir=self.tmp, prefix="t.")
        pkg = shutil.copytree(os.path.join(self.tmp, "base", name + ".cudaqpkg"),
                              os.path.join(d, name + ".cudaqpkg"))
        return pkg, os.path.join(d, "cache")

    def link(self, pkg, *args, cache, status=0, env=None):
        r = run([LINK, pkg, *args], env or cache_env(cache))
        self.assertEqual(r.returncode, status, f"{args}\n{r.stdout}{r.stderr}")
        return r

    def link_json(self, pkg, *args, cache):
        doc = json.loads(self.link(pkg, "--json", *args, cache=cache).stdout)
        self.assertTrue(doc["ok"])
        return doc

    def manifest(self, pkg):
        return json.loads(read(os.path.join(pkg, "manifest.json")))

    def blob(self, pkg, digest):
        return read_blob(pkg, digest)

    def required_paths(self, schema, node, instance, path=()):
        """Every key the schema marks required that `instance` holds, as a path of keys and list
        indexes (the first element of each array), resolving #/$defs references."""
        while isinstance(node, dict) and "$ref" in node:
            node = schema["$defs"][node["$ref"].split("/")[-1]]
        if not isinstance(node, dict):
            return
        if isinstance(instance, dict):
            for key in node.get("required", []):
                if key in instance:
                    yield path + (key,)
            for key, sub in node.get("properties", {}).items():
                if key in instance:
                    yield from self.required_paths(schema, sub, instance[key], path + (key,))
        elif isinstance(instance, list) and instance and "items" in node:
            yield from self.required_paths(schema, node["items"], instance[0], path + (0,))

    def test_a_manifest_without_any_required_key_is_refused(self):
        # Each key the schema requires, removed alone from a linked package's manifest: the
        # package no longer opens (cudaq-rt-pack --list, which reads it as every tool does). A key
        # the code took as optional (containers[].role, in a mutation run) passed no test before.
        schema = json.loads(read(SCHEMA_PATH))
        paths = list(self.required_paths(schema, schema, self.linked_manifest))
        for must in (("containers", 0, "role"), ("links", 0, "cubin"), ("format_version",),
                     ("exports", 0, "name")):
            self.assertIn(must, paths)
        for path in paths:
            with self.subTest(path="/".join(map(str, path))):
                pkg, _ = self.fresh()
                shutil.rmtree(pkg)
                shutil.copytree(self.linked, pkg)
                m = json.loads(read(os.path.join(pkg, "manifest.json")))
                at = m
                for k in path[:-1]:
                    at = at[k]
                del at[path[-1]]
                mpath = os.path.join(pkg, "manifest.json")
                os.chmod(mpath, 0o644)
                with open(mpath, "w") as f:
                    json.dump(m, f)
                r = run([PACK, "--list", pkg], cache_env(self.path("unused-cache")))
                self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
                self.assertEqual(r.stdout, "")
                self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
                self.assertIn("manifest", r.stderr)

    def cubin_digests(self, doc):
        return {a["arch"]: a["cubin"]["digest"] for a in doc["archs"]}

    # What every failure must satisfy: the exit status, one `cudaq-rt-link: error: ` line holding
    # every keyword, nothing on stdout, the package unchanged byte for byte, no directory left
    # beside it, and no cache entry (or partial one) written.
    def link_fails(self, pkg, args, keywords, status=1, cache=None, env_extra=None,
                   units_cached=False):
        parent = os.path.dirname(os.path.abspath(pkg))
        cache = cache or os.path.join(tempfile.mkdtemp(dir=self.tmp, prefix="c."), "cache")
        lock = "." + os.path.basename(pkg) + ".lock"
        before = (snapshot(pkg), sorted(set(os.listdir(parent)) - {lock}),
                  snapshot(cache, skip={"v1/stats"}, dirs=False))
        r = run([LINK, pkg, *args], cache_env(cache, **(env_extra or {})))
        self.assertEqual(r.returncode, status, f"{args}\n{r.stderr}")
        self.assertEqual(r.stdout, "")
        errors = [l for l in r.stderr.splitlines() if l.startswith("cudaq-rt-link: error: ")]
        self.assertEqual(len(errors), 1, r.stderr)
        for k in keywords:
            self.assertIn(k, errors[0])
        after = (snapshot(pkg), sorted(set(os.listdir(parent)) - {lock}),
                 snapshot(cache, skip={"v1/stats"}, dirs=False))
        self.assertEqual(before[0], after[0], "a failed link changed the package")
        self.assertEqual(before[1], after[1], "a failed link left something beside the package")
        if units_cached:  # per-TU: the units that compiled are kept, but no module
            for name in set(after[2]) - set(before[2]):
                entry = read(os.path.join(cache, name))
                size, = struct.unpack_from("<Q", entry, 48)
                self.assertEqual(json.loads(entry[128:128 + size])["mode"], "object", name)
            after = after[:2] + (before[2],)
        self.assertEqual(before[2], after[2], "a failed link wrote to the cache")
        return errors[0], r.stderr

    # --- what a link records ------------------------------------------------------------------

    def test_link_records_in_manifest(self):
        m = self.linked_manifest
        self.assertEqual(validate_schema.validate(self.schema, m), [])
        self.assertEqual([l["arch"] for l in m["links"]], ["sm_80", "sm_90"])
        containers = {c["digest"]: c for c in m["containers"]}
        # What pack wrote is still there, unchanged, first.
        self.assertEqual(m["containers"][:3], self.base_manifest["containers"])
        self.assertEqual(m["exports"], self.base_manifest["exports"])
        for l in m["links"]:
            self.assertEqual(l["bridge"], "loopback")
            self.assertEqual(l["dispatcher"], "builtin")
            # The default mode's record: the link's --json says which mode that was.
            self.assertEqual(l["mode"], {"whole": "lto", "per-tu": "lto-per-tu"}[
                self.linked_json["lto"]])
            self.assertEqual(l["nvjitlink_version"], "13.0")
            self.assertIn("-arch=" + l["arch"], l["options"])
            self.assertIn("-lto", l["options"])
            self.assertIn("-kernels-used=" + KERNEL, l["options"])
            # Whole: the handler globals are named; per-TU: a unit keeps its globals itself, and
            # its key must not depend on the other units' exports.
            for s in HANDLER_SYMBOLS:
                if l["mode"] == "lto":
                    self.assertIn("-variables-used=" + s, l["options"])
                else:
                    self.assertIn("-Xptxas=-c", l["options"])
                    self.assertNotIn("-variables-used=" + s, l["options"])
            self.assertRegex(l["cache_key"], r"^sha256:[0-9a-f]{64}$")
            # Inputs, in link order: the dispatcher, the bridge's hooks, the application.
            roles = [containers[d]["role"] for d in l["inputs"]]
            self.assertEqual(roles, ["dispatcher", "bridge", "application", "application",
                                     "application"])
            self.assertEqual(containers[l["inputs"][1]]["bridge"], "loopback")
            self.assertEqual(l["inputs"][2:], [c["digest"] for c in m["containers"][:3]])
            cubin = self.blob(self.linked, l["cubin"]["digest"])
            self.assertEqual(sha256(cubin), l["cubin"]["digest"])
            self.assertEqual(len(cubin), l["cubin"]["size"])
        self.assertNotEqual(m["links"][0]["cache_key"], m["links"][1]["cache_key"])
        # The containers link added resolve to blobs with their digest; the bridge's names its
        # library as a source.
        for c in m["containers"]:
            self.assertEqual(sha256(self.blob(self.linked, c["digest"])), c["digest"])
        bridge = containers[m["links"][0]["inputs"][1]]
        src = m["sources"][bridge["origins"][0]["source"]]
        self.assertTrue(src["path"].endswith("libcudaq_rt_bridge_loopback.so"), src)
        self.assertEqual(src["kind"], "shared-library")
        self.assertEqual(src["digest"], sha256(read(src["path"])))
        # Nothing in blobs/ that the manifest does not name.
        named = {c["digest"] for c in m["containers"]} | {l["cubin"]["digest"] for l in m["links"]}
        self.assertEqual(manifest_blobs(self.linked),
                         sorted(d[len("sha256:"):] for d in named))
        self.assertEqual(sorted(os.listdir(self.linked)),
                         ["blobs", "index.json", "manifest.json", "oci-layout"])
        # Beside it only the lock file: no temporary directory left over.
        self.assertEqual(sorted(os.listdir(self.linked_dir)), [".app.cudaqpkg.lock", "app.cudaqpkg"])

    def test_json_matches_manifest(self):
        doc = self.linked_json
        self.assertEqual((doc["bridge"], doc["dispatcher"], doc["dry_run"], doc["ok"]),
                         ("loopback", "builtin", False, True))
        by_arch = {l["arch"]: l for l in self.linked_manifest["links"]}
        for a in doc["archs"]:
            l = by_arch[a["arch"]]
            self.assertFalse(a["cache_hit"])
            self.assertEqual(a["cubin"]["digest"], l["cubin"]["digest"])
            self.assertEqual(a["cache_key"], l["cache_key"])
            self.assertEqual(a["key"]["digest"], l["cache_key"])
            self.assertEqual(a["key"]["inputs"], l["inputs"])
            self.assertEqual(a["key"]["nvjitlink"]["version"], "13.0")
            self.assertEqual(a["options"], l["options"])
            self.assertEqual(len(a["inputs"]), len(l["inputs"]))
            self.assertEqual(a["inputs"][0], "dispatcher builtin")

    def test_cubin_is_cuda_elf_for_its_arch(self):
        for l in self.linked_manifest["links"]:
            machine, flags, symbols = cubin_info(self.blob(self.linked, l["cubin"]["digest"]))
            self.assertEqual(machine, EM_CUDA)
            self.assertEqual((flags >> 8) & 0xFF, int(l["arch"][3:]), hex(flags))
            self.assertEqual(symbols.get(KERNEL), "func")
            for s in HANDLER_SYMBOLS:
                self.assertEqual(symbols.get(s), "object", s)
            handlers = sorted(s for s in symbols if s.startswith("cudaq_rt_handler__"))
            self.assertEqual(handlers, HANDLER_SYMBOLS)

    def test_relink_without_cache_is_byte_identical(self):
        pkg, cache = self.fresh()
        doc = self.link_json(pkg, "--arch", "sm_80,sm_90", "--no-cache", cache=cache)
        self.assertFalse(any(a["cache_hit"] for a in doc["archs"]))
        self.assertFalse(os.path.exists(cache), "--no-cache touched the cache")
        for l, mine in zip(self.linked_manifest["links"], self.manifest(pkg)["links"]):
            self.assertEqual(self.blob(pkg, mine["cubin"]["digest"]),
                             self.blob(self.linked, l["cubin"]["digest"]))
            self.assertEqual(mine["cache_key"], l["cache_key"])

    def test_cubins_are_stored_compressed_unless_no_compress(self):
        # The default: each cubin one zstd frame under its own digest, several times smaller,
        # the link record naming the cubin's digest; --no-compress: the cubin as it is, and the
        # manifest stays format 1 (the example's containers are nvcc-compressed already).
        pkg, cache = self.fresh()
        self.link(pkg, "--arch", "sm_90", cache=cache)
        m = self.manifest(pkg)
        (l,) = m["links"]
        self.assertEqual(m["format_version"], 2)
        (form,) = [s for s in m["stored"] if s["digest"] == l["cubin"]["digest"]]
        self.assertLess(form["stored_size"] * 3, l["cubin"]["size"])
        self.assertFalse(os.path.exists(os.path.join(pkg, "blobs", "sha256",
                                                     l["cubin"]["digest"][7:])))
        self.assertEqual(len(read_blob(pkg, l["cubin"]["digest"])), l["cubin"]["size"])
        plain, cache = self.fresh()
        self.link(plain, "--arch", "sm_90", "--no-compress", cache=cache)
        m = self.manifest(plain)
        self.assertEqual(m["format_version"], 1)
        self.assertNotIn("stored", m)
        self.assertEqual(m["links"][0]["cubin"], l["cubin"])
        self.assertEqual(os.path.getsize(os.path.join(plain, "blobs", "sha256",
                                                      l["cubin"]["digest"][7:])),
                         l["cubin"]["size"])

    def test_source_date_epoch_is_the_records_time_and_a_bad_one_is_refused(self):
        # Reproducible builds: SOURCE_DATE_EPOCH is the time each link record says it was made;
        # a value that is not seconds is an error naming it, before anything is linked or written.
        pkg, cache = self.fresh()
        env = dict(cache_env(cache), SOURCE_DATE_EPOCH="1700000000")
        self.link(pkg, "--arch", "sm_80,sm_90", cache=cache, env=env)
        self.assertEqual([l["created"] for l in self.manifest(pkg)["links"]],
                         ["2023-11-14T22:13:20Z"] * 2)
        before = read(os.path.join(pkg, "manifest.json"))
        for bad in ("soon", "-1", "1.5"):
            r = self.link(pkg, "--arch", "sm_100", cache=cache, status=1,
                          env=dict(cache_env(cache), SOURCE_DATE_EPOCH=bad))
            self.assertEqual(r.stderr, f"cudaq-rt-link: error: SOURCE_DATE_EPOCH is '{bad}': not "
                             "a number of seconds since 1970-01-01T00:00:00Z\n")
            self.assertEqual(read(os.path.join(pkg, "manifest.json")), before)

    def test_second_link_hits_the_cache(self):
        pkg, cache = self.fresh()
        first = self.link_json(pkg, "--arch", "sm_80,sm_90", cache=cache)
        stats = lambda: json.loads(self.link("--cache-stats", "--json", cache=cache).stdout)["cache"]  # noqa: E731
        s1 = stats()
        units = s1["units"]["misses"]  # per-TU mode: each unit compiled is an entry too
        self.assertEqual((s1["entries"], s1["stores"], s1["hits"]), (2 + units, 2 + units, 0))
        second = self.link_json(pkg, "--arch", "sm_80,sm_90", cache=cache)
        self.assertEqual([a["cache_hit"] for a in first["archs"]], [False, False])
        self.assertEqual([a["cache_hit"] for a in second["archs"]], [True, True])
        self.assertEqual(self.cubin_digests(first), self.cubin_digests(second))
        self.assertEqual(self.cubin_digests(first), self.cubin_digests(self.linked_json))
        s2 = stats()
        self.assertEqual(s2["hits"], s1["hits"] + 2)
        self.assertEqual((s2["entries"], s2["stores"]), (2 + units, 2 + units))
        self.assertEqual(s2["units"], s1["units"], "a module hit looked its units up")
        # Relinking an already linked package replaces its records instead of adding more.
        m = self.manifest(pkg)
        self.assertEqual([l["arch"] for l in m["links"]], ["sm_80", "sm_90"])
        self.assertEqual(validate_schema.validate(self.schema, m), [])

    def test_code_a_link_added_is_never_a_later_links_input(self):
        # The built-in dispatcher and the installed bridge's hooks are stored for the record,
        # marked as added by the link; a relink takes them afresh from the runtime and the bridge
        # library (whose host side is what will run), not from the package's copy.
        m = self.linked_manifest
        added = [c for c in m["containers"] if c.get("added_by") == "cudaq-rt-link"]
        self.assertEqual(sorted(c["role"] for c in added), ["bridge", "dispatcher"])
        self.assertTrue(all("added_by" not in c for c in self.base_manifest["containers"]))
        pkg, cache = self.fresh()
        self.link(pkg, "--arch", "sm_80", cache=cache)
        again = self.link_json(pkg, "--arch", "sm_80", "--dry-run", cache=cache)
        names = again["archs"][0]["inputs"]
        self.assertEqual(names[0], "dispatcher builtin")
        self.assertTrue(names[1].startswith("bridge loopback ") and
                        names[1].endswith("libcudaq_rt_bridge_loopback.so#0"), names)
        self.assertEqual(len(names), 5, names)  # no second copy of the hooks or the dispatcher
        self.assertEqual(validate_schema.validate(self.schema, self.manifest(pkg)), [])

    def test_relink_drops_link_additions_no_record_uses(self):
        # As after an upgrade of the bridge library: an added container no link record names.
        pkg, cache = self.fresh()
        self.link(pkg, "--arch", "sm_80", cache=cache)
        m = self.manifest(pkg)
        bridge = next(c for c in m["containers"] if c["role"] == "bridge")
        stale_bytes = self.blob(pkg, bridge["digest"]) + bytes(8)
        stale = dict(bridge, digest=sha256(stale_bytes), size=len(stale_bytes))
        with open(os.path.join(pkg, "blobs", "sha256", stale["digest"][7:]), "wb") as f:
            f.write(stale_bytes)
        m["containers"].append(stale)
        with open(os.path.join(pkg, "manifest.json"), "w") as f:
            json.dump(m, f)
        self.link(pkg, "--arch", "sm_80", cache=cache)
        after = self.manifest(pkg)
        self.assertNotIn(stale["digest"], [c["digest"] for c in after["containers"]])
        self.assertFalse(os.path.exists(os.path.join(pkg, "blobs", "sha256", stale["digest"][7:])))
        self.assertEqual(after["containers"], m["containers"][:-1])
        self.assertEqual(after["sources"], m["sources"])
        self.assertEqual(validate_schema.validate(self.schema, after), [])

    def test_package_named_with_a_trailing_slash(self):
        # As shell completion writes it: the temporary directory and the lock go beside the
        # package, not into it.
        pkg, cache = self.fresh()
        self.link(pkg + "/", "--arch", "sm_80", cache=cache)
        self.assertEqual(sorted(os.listdir(pkg)), ["blobs", "index.json", "manifest.json", "oci-layout"])
        self.assertEqual(sorted(os.listdir(os.path.dirname(pkg))),
                         [".app.cudaqpkg.lock", "app.cudaqpkg", "cache"])
        self.assertEqual([l["arch"] for l in self.manifest(pkg)["links"]], ["sm_80"])

    def test_a_cache_that_cannot_store_costs_a_warning_not_the_link(self):
        pkg, cache = self.fresh()
        os.makedirs(os.path.join(cache, "v1"))
        for i in range(256):  # every shard a regular file: no entry can be written
            open(os.path.join(cache, "v1", "%02x" % i), "w").close()
        r = self.link(pkg, "--arch", "sm_80", cache=cache)
        self.assertRegex(r.stderr, r"^cudaq-rt-link: warning: sm_80: not cached: ")
        self.assertEqual([l["arch"] for l in self.manifest(pkg)["links"]], ["sm_80"])

    def test_no_cache_needs_no_cache_settings(self):
        pkg, cache = self.fresh()
        env = cache_env(cache, CUDAQ_RT_CACHE_MAXSIZE="bogus")
        for k in ("HOME", "XDG_CACHE_HOME", "CUDAQ_RT_CACHE_DIR"):
            env.pop(k, None)
        r = run([LINK, pkg, "--arch", "sm_80", "--no-cache", "--no-store"], env)
        self.assertEqual(r.returncode, 0, r.stderr)
        # --cache-dir stands in for the environment's directory (and is made absolute).
        env.pop("CUDAQ_RT_CACHE_MAXSIZE")
        r = run([LINK, pkg, "--arch", "sm_80", "--no-store", "--cache-dir",
                 os.path.relpath(cache)], env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.isdir(os.path.join(cache, "v1")))

    def test_a_cache_that_cannot_be_made_or_located_costs_a_warning_not_the_link(self):
        pkg, cache = self.fresh()
        blocker = os.path.join(os.path.dirname(cache), "a-file")
        open(blocker, "w").close()
        r = run([LINK, pkg, "--arch", "sm_80", "--no-store"],
                cache_env(os.path.join(blocker, "cache")))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stderr, r"^cudaq-rt-link: warning: not using a link cache: '.*/a-file/"
                                   r"cache/v1': cannot create the link cache directory: ")
        # No directory at all for a cache: a link goes on, a dry run needs none and says nothing.
        env = cache_env(cache)
        for k in ("HOME", "XDG_CACHE_HOME", "CUDAQ_RT_CACHE_DIR"):
            env.pop(k, None)
        r = run([LINK, pkg, "--arch", "sm_80", "--dry-run"], env)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        r = run([LINK, pkg, "--arch", "sm_80", "--no-store"], env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr.splitlines(),
                         ["cudaq-rt-link: warning: not using a link cache: no directory for the "
                          "link cache: set CUDAQ_RT_CACHE_DIR, XDG_CACHE_HOME or HOME, or set "
                          "CUDAQ_RT_CACHE_DISABLE=1"])

    def test_an_option_that_is_not_utf8_is_refused(self):
        pkg, _ = self.fresh()
        r = subprocess.run([os.fsencode(LINK), os.fsencode(pkg), b"--arch", b"sm_80",
                            b"-X", b"-Xptxas=-O\xff"], capture_output=True,
                           env=cache_env(os.path.join(self.tmp, "utf8-cache")))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stderr.decode().splitlines(),
                         [f"cudaq-rt-link: error: '{pkg}': nvJitLink option '-Xptxas=-O\\xff' "
                          "is not valid UTF-8: a link record could not say what was used"])
        self.assertEqual(self.manifest(pkg)["links"], [])

    def test_a_cache_hit_reports_this_runs_time_beside_the_links(self):
        pkg, cache = self.fresh()
        first = self.link_json(pkg, "--arch", "sm_80", cache=cache)["archs"][0]
        second = self.link_json(pkg, "--arch", "sm_80", cache=cache)["archs"][0]
        self.assertTrue(second["cache_hit"])
        self.assertEqual(second["cubin"]["link_ms"], first["cubin"]["link_ms"])
        self.assertLess(second["cubin"]["time_ms"], first["cubin"]["link_ms"])
        r = self.link(pkg, "--arch", "sm_80", cache=cache)
        self.assertRegex(r.stdout, r"^sm_80  cached  \d+ bytes  [0-9.]+ ms \(linked in [0-9.]+ "
                                   r"ms\)  sha256:[0-9a-f]{64}$")

    def test_cache_stats_with_link_is_one_json_document(self):
        pkg, cache = self.fresh()
        doc = json.loads(self.link(pkg, "--arch", "sm_80", "--json", "--cache-stats",
                                   cache=cache).stdout)
        self.assertTrue(doc["ok"])
        # One module, and in per-TU mode each unit it compiled.
        self.assertEqual(doc["cache"]["stores"], 1 + doc["cache"]["units"]["misses"])
        self.assertEqual(doc["cache"]["dir"], cache)

    def test_verbose_and_plain_links_do_not_share_a_cubin(self):
        # -verbose makes ptxas write -v into the cubin's .note.nv.tkinfo: a different cubin, so
        # a different key; a plain link after a verbose one must not get the verbose cubin.
        pkg, cache = self.fresh()
        r = self.link(pkg, "--arch", "sm_80", "-v", "--json", cache=cache)
        verbose = json.loads(r.stdout)["archs"][0]
        plain = self.link_json(pkg, "--arch", "sm_80", cache=cache)["archs"][0]
        self.assertFalse(plain["cache_hit"])
        self.assertNotEqual(verbose["cache_key"], plain["cache_key"])
        self.assertEqual(plain["cubin"]["digest"], self.cubin_digests(self.linked_json)["sm_80"])

    # --- dry run, options and the key ---------------------------------------------------------

    def test_dry_run_writes_nothing_and_prints_the_keys(self):
        pkg, _ = self.fresh()
        cache = self.linked_cache  # a cache with entries: a dry run must not even count a hit
        parent = os.path.dirname(pkg)
        before = (snapshot(pkg), sorted(os.listdir(parent)), snapshot(cache))
        r = self.link(pkg, "--arch", "sm_80,sm_90", "--dry-run", cache=cache)
        self.assertEqual(r.stderr, "")
        keys = dict(re.findall(r"^(sm_\d+)  key (sha256:[0-9a-f]{64})$", r.stdout, re.M))
        self.assertEqual(keys, {l["arch"]: l["cache_key"] for l in self.linked_manifest["links"]})
        self.assertIn("  input: dispatcher builtin", r.stdout)
        self.assertIn(f"-kernels-used={KERNEL}", r.stdout)
        doc = json.loads(self.link(pkg, "--arch", "sm_80,sm_90", "--dry-run", "--json",
                                   cache=cache).stdout)
        self.assertTrue(doc["dry_run"])
        self.assertEqual({a["arch"]: a["cache_key"] for a in doc["archs"]}, keys)
        self.assertTrue(all("cubin" not in a for a in doc["archs"]))
        self.assertEqual(before, (snapshot(pkg), sorted(os.listdir(parent)), snapshot(cache)))
        # Not even an empty cache directory.
        fresh_cache = os.path.join(parent, "never")
        self.link(pkg, "--arch", "sm_80", "--dry-run", cache=fresh_cache)
        self.assertFalse(os.path.exists(fresh_cache))

    def test_options_that_change_the_key(self):
        pkg, cache = self.fresh()

        def key(*args):
            doc = json.loads(self.link(pkg, "--arch", "sm_90", "--dry-run", "--json", *args,
                                       cache=cache).stdout)
            return doc["archs"][0]["cache_key"], doc["archs"][0]["options"]

        base, options = key()
        self.assertEqual(base, self.linked_json["archs"][1]["cache_key"])
        o0, o0_options = key("-O", "0")
        self.assertIn("-O0", o0_options)
        o3, _ = key("-O", "3")
        ftz, ftz_options = key("--Xnvjitlink=-ftz=true")
        self.assertIn("-ftz=true", ftz_options)
        ftz2, _ = key("-X", "-ftz=true")
        nku, nku_options = key("--no-kernels-used")
        self.assertFalse(any(o.startswith(("-kernels-used", "-variables-used")) for o in nku_options))
        keys = [base, o0, o3, ftz, nku]
        self.assertEqual(len(set(keys)), len(keys), keys)
        self.assertEqual(ftz2, ftz)
        # -time and -no-cache only change the log and nvJitLink's in-memory reuse.
        self.assertEqual(key("--Xnvjitlink=-time")[0], base)
        self.assertEqual(key("--Xnvjitlink=-no-cache")[0], base)
        a90a = json.loads(self.link(pkg, "--arch", "sm_90a", "--dry-run", "--json",
                                    cache=cache).stdout)["archs"][0]
        self.assertEqual(a90a["arch"], "sm_90a")
        self.assertNotEqual(a90a["cache_key"], base)

    def test_jobs_do_not_change_the_cubins(self):
        pkg, cache = self.fresh()
        archs = ["--arch", "sm_80,sm_90,sm_100", "--no-store"]
        one = self.link_json(pkg, *archs, "-j", "1", "--no-cache", cache=cache)
        two = self.link_json(pkg, *archs, "-j", "2", cache=cache)
        self.assertEqual(list(self.cubin_digests(one)), ["sm_80", "sm_90", "sm_100"])
        self.assertEqual(self.cubin_digests(one), self.cubin_digests(two))
        self.assertFalse(any(a["cache_hit"] for a in two["archs"]))
        self.assertEqual(self.manifest(pkg)["links"], [], "--no-store stored links")

    def test_verbose_prints_the_info_log(self):
        pkg, cache = self.fresh()
        r = self.link(pkg, "--arch", "sm_80", "-v", "--no-cache", "--no-store", cache=cache)
        self.assertIn("cudaq-rt-link: sm_80: nvJitLink info log:", r.stderr)
        self.assertIn(f"Compiling entry function '{KERNEL}' for 'sm_80'", r.stderr)
        self.assertRegex(r.stderr, r"ptxas info\s*: Used \d+ registers")
        self.assertIn("nvJitLinkComplete time", r.stderr)  # -time
        quiet = self.link(pkg, "--arch", "sm_80", "--no-cache", "--no-store", cache=cache)
        self.assertEqual(quiet.stderr, "")
        self.assertRegex(quiet.stdout, r"^sm_80  linked  \d+ bytes  [\d.]+ ms  sha256:[0-9a-f]{64}$")

    def test_save_temps(self):
        pkg, cache = self.fresh()
        temps = os.path.join(os.path.dirname(pkg), "temps")
        self.link(pkg, "--arch", "sm_80,sm_90", "--save-temps", temps, cache=cache)
        m = self.manifest(pkg)
        self.assertEqual(sorted(os.listdir(temps)), ["sm_80", "sm_90"])
        for l in m["links"]:
            d = os.path.join(temps, l["arch"])
            fatbins = sorted(f for f in os.listdir(d) if f.endswith(".fatbin"))
            self.assertEqual(len(fatbins), len(l["inputs"]))
            for k, (f, digest) in enumerate(zip(fatbins, l["inputs"])):
                self.assertEqual(f, f"{k}-{digest[7:19]}.fatbin")
                self.assertEqual(sha256(read(os.path.join(d, f))), digest)
            self.assertEqual(read(os.path.join(d, "options.txt")).decode().splitlines(),
                             l["options"])
            self.assertTrue(os.path.isfile(os.path.join(d, "nvjitlink.log")))
            self.assertEqual(read(os.path.join(d, "module.cubin")),
                             self.blob(pkg, l["cubin"]["digest"]))

    def test_no_kernels_used_keeps_more_code(self):
        pkg, cache = self.fresh("extra")
        handlers = ["cudaq_rt_handler__negate_i32", "cudaq_rt_handler__axpy_f32",
                    "cudaq_rt_handler__sum_i32"]
        unused = "cudaq_rt_test_unused_kernel"
        default = self.link_json(pkg, "--arch", "sm_80", "--no-store", cache=cache)["archs"][0]
        everything = self.link_json(pkg, "--arch", "sm_80", "--no-kernels-used",
                                    cache=cache)["archs"][0]
        self.assertGreater(everything["cubin"]["size"], default["cubin"]["size"])
        self.assertNotEqual(everything["cache_key"], default["cache_key"])
        l = self.manifest(pkg)["links"][0]
        self.assertFalse(any(o.startswith(("-kernels-used", "-variables-used"))
                             for o in l["options"]))
        _, _, symbols = cubin_info(self.blob(pkg, l["cubin"]["digest"]))
        self.assertEqual(symbols.get(unused), "func")
        self.assertEqual(symbols.get(KERNEL), "func")
        for s in handlers:
            self.assertEqual(symbols.get(s), "object", s)
        # The default link drops the kernel nothing launches and keeps every handler.
        temps = os.path.join(os.path.dirname(pkg), "temps")
        self.link(pkg, "--arch", "sm_80", "--no-store", "--save-temps", temps, cache=cache)
        _, _, symbols = cubin_info(read(os.path.join(temps, "sm_80", "module.cubin")))
        self.assertNotIn(unused, symbols)
        for s in handlers:
            self.assertEqual(symbols.get(s), "object", s)

    def test_concurrent_links_of_one_package(self):
        pkg, cache = self.fresh()
        procs = [subprocess.Popen([LINK, pkg, "--arch", arch], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=cache_env(cache))
                 for arch in ("sm_80", "sm_90")]
        for p in procs:
            out, err = p.communicate(timeout=300)
            self.assertEqual(p.returncode, 0, err)
        m = self.manifest(pkg)
        self.assertEqual(validate_schema.validate(self.schema, m), [])
        self.assertEqual([l["arch"] for l in m["links"]], ["sm_80", "sm_90"])
        self.assertEqual({l["arch"]: l["cubin"]["digest"] for l in m["links"]},
                         self.cubin_digests(self.linked_json))
        for l in m["links"]:
            self.assertEqual(sha256(self.blob(pkg, l["cubin"]["digest"])), l["cubin"]["digest"])
        self.assertEqual(sorted(os.listdir(os.path.dirname(pkg))),
                         [".app.cudaqpkg.lock", "app.cudaqpkg", "cache"])

    def test_cache_disabled_by_environment(self):
        pkg, cache = self.fresh()
        env = cache_env(cache, CUDAQ_RT_CACHE_DISABLE="1")
        for _ in range(2):
            doc = json.loads(self.link(pkg, "--arch", "sm_80", "--json", cache=cache,
                                       env=env).stdout)
            self.assertFalse(doc["archs"][0]["cache_hit"])
        self.assertFalse(os.path.exists(cache), "a disabled cache wrote to disk")
        self.assertEqual(doc["archs"][0]["cubin"]["digest"],
                         self.cubin_digests(self.linked_json)["sm_80"])
        bad = cache_env(cache, CUDAQ_RT_CACHE_DISABLE="perhaps")
        r = run([LINK, pkg, "--arch", "sm_80"], bad)
        self.assertEqual(r.returncode, 1)
        self.assertIn("CUDAQ_RT_CACHE_DISABLE", r.stderr)

    # --- errors ---------------------------------------------------------------------------------

    def test_arch_the_code_cannot_serve(self):
        pkg, cache = self.fresh()
        line, _ = self.link_fails(pkg, ["--arch", "sm_75"],
                                  [f"'{pkg}': ", "cannot link for sm_75", "can serve sm_80 and newer"])
        # One bad arch among good ones: nothing is linked or stored.
        self.link_fails(pkg, ["--arch", "sm_80,sm_75"], ["cannot link for sm_75"])

    def test_unknown_arch(self):
        pkg, _ = self.fresh()
        for bad in ("sm_9x", "sm_", "sm_090", "90"):
            self.link_fails(pkg, ["--arch", bad], [f"unknown arch '{bad}'", "sm_NN"], status=2)
        self.link_fails(pkg, ["--arch", "compute_90"],
                        ["unknown arch 'compute_90'", "not a link target", "give sm_90"], status=2)

    def test_no_arch_is_a_usage_error(self):
        pkg, _ = self.fresh()
        self.link_fails(pkg, [], ["no target arch", "--arch"], status=2)
        self.link_fails(pkg, ["--arch", "sm_80", "-O", "2"], ["-O"], status=2)
        self.link_fails(pkg, ["--arch", "sm_80", "--no-such-option"], ["--no-such-option"],
                        status=2)

    def test_ltoir_from_a_newer_toolkit(self):
        pkg, _ = self.fresh("newer")
        minor, major = self.ltoir_version
        line, _ = self.link_fails(pkg, ["--arch", "sm_80"],
                                  [f"LTO-IR version {major}.{minor + 1}", "newer CUDA toolkit",
                                   "nvJitLink 13.0", "newer.fatbin"])
        self.assertNotIn("nvJitLink failed", line)  # caught before nvJitLink runs

    def test_ltoir_from_another_major(self):
        pkg, _ = self.fresh("othermajor")
        minor, major = self.ltoir_version
        line, _ = self.link_fails(pkg, ["--arch", "sm_80"],
                                  [f"LTO-IR version {major + 1}.{minor}", "another major"])
        self.assertNotIn("nvJitLink failed", line)

    # --- --lto per-tu and whole -----------------------------------------------------------------

    def cubin(self, doc, arch):
        a = next(a for a in doc["archs"] if a["arch"] == arch)
        return read_blob(doc["package"], a["cubin"]["digest"])

    def test_both_modes_define_the_kernel_and_every_handler(self):
        pkg, cache = self.fresh()
        docs, records = {}, {}
        for mode in ("whole", "per-tu"):
            doc = docs[mode] = self.link_json(pkg, "--arch", "sm_80,sm_90", "--lto", mode,
                                              cache=cache)
            self.assertEqual(doc["lto"], mode)
            for a in doc["archs"]:
                self.assertEqual(a["lto"], mode)
                self.assertFalse(a["cache_hit"])
                data = self.cubin(doc, a["arch"])
                machine, flags, symbols = cubin_info(data)
                self.assertEqual(machine, EM_CUDA)
                self.assertEqual(struct.unpack_from("<H", data, 0x10)[0], 2, "not ET_EXEC")
                self.assertEqual((flags >> 8) & 0xFF, int(a["arch"][3:]))
                self.assertEqual(symbols.get(KERNEL), "func", (mode, a["arch"]))
                handlers = sorted(s for s in symbols if s.startswith("cudaq_rt_handler__"))
                self.assertEqual(handlers, HANDLER_SYMBOLS, (mode, a["arch"]))
            records[mode] = {l["arch"]: l for l in self.manifest(pkg)["links"]}
            self.assertEqual(validate_schema.validate(self.schema, self.manifest(pkg)), [])
        self.assertEqual([l["mode"] for l in records["whole"].values()], ["lto", "lto"])
        self.assertEqual([l["mode"] for l in records["per-tu"].values()], ["lto-per-tu"] * 2)
        for arch in ("sm_80", "sm_90"):
            self.assertNotEqual(records["whole"][arch]["cache_key"],
                                records["per-tu"][arch]["cache_key"])
            self.assertNotEqual(records["whole"][arch]["cubin"], records["per-tu"][arch]["cubin"])
            self.assertIn("-Xptxas=-c", records["per-tu"][arch]["options"])
            self.assertNotIn("-Xptxas=-c", records["whole"][arch]["options"])
        # Per-TU: the dispatcher with the bridge's hooks (the unit the build ships, for sm_80),
        # then one unit per application container.
        units = docs["per-tu"]["archs"][0]["units"]
        self.assertEqual([u["source"] for u in units], ["shipped"] + ["compiled"] * 3)
        self.assertTrue(units[0]["name"].startswith("dispatcher builtin + bridge loopback"))
        self.assertEqual([u["name"] for u in units[1:]], ["arith.o#0", "decode.o#0", "bits.o#0"])
        # Each mode finds its own module in the cache.
        for mode in ("whole", "per-tu"):
            again = self.link_json(pkg, "--arch", "sm_80,sm_90", "--lto", mode, cache=cache)
            self.assertEqual([a["cache_hit"] for a in again["archs"]], [True, True])
            self.assertEqual(self.cubin_digests(again), self.cubin_digests(docs[mode]))
            self.assertNotIn("units", again["archs"][0])

    def test_a_whole_program_calls_the_handlers_by_name(self):
        pkg, cache = self.fresh()
        temps = os.path.join(os.path.dirname(pkg), "temps")
        records, containers = {}, {}
        for mode in ("whole", "per-tu"):  # a link replaces the arch's record of the other mode
            doc = self.link_json(pkg, "--arch", "sm_90", "--lto", mode,
                                 *(["--save-temps", temps] if mode == "whole" else []),
                                 cache=cache)
            # The generated unit, named after the dispatcher (whole only: per TU the built-in
            # kernel calls through the table).
            names = doc["archs"][0]["inputs"]
            self.assertEqual(names[0], "dispatcher builtin")
            self.assertEqual(names[1].startswith("direct calls (generated) sha256:"),
                             mode == "whole", names)
            m = self.manifest(pkg)
            self.assertEqual(validate_schema.validate(self.schema, m), [])
            records[mode] = m["links"][0]
            containers.update({c["digest"]: c for c in m["containers"]})
        # The built-in kernel in its direct form, a dispatcher container of its own; every other
        # input the same in both modes.
        whole, per_tu = records["whole"]["inputs"], records["per-tu"]["inputs"]
        self.assertNotEqual(whole[0], per_tu[0])
        self.assertEqual(whole[1:], per_tu[1:])
        for digest in (whole[0], per_tu[0]):
            self.assertEqual(containers[digest]["role"], "dispatcher")
            self.assertEqual(containers[digest]["added_by"], "cudaq-rt-link")
        # The generated unit, saved beside the inputs: one case per example handler, which calls
        # it by name once the table's pointer is its named call.
        source = read(os.path.join(temps, "sm_90", "direct_calls.cu")).decode()
        for name in EXAMPLE_HANDLERS:
            self.assertIn(f"  case {fnv1a32(name):#x}u:\n"
                          f"    if (handler == cudaq_rt_handler_call__{name}) {{ // {name}\n",
                          source)
        self.assertGreater(os.path.getsize(os.path.join(temps, "sm_90", "direct_calls.ltoir")),
                           0)
        _, _, symbols = cubin_info(read(os.path.join(temps, "sm_90", "module.cubin")))
        self.assertEqual(symbols.get(KERNEL), "func")
        self.assertEqual(sorted(s for s in symbols if s.startswith("cudaq_rt_handler__")),
                         HANDLER_SYMBOLS)

        # Handlers exported by older macros (no named call): the plain kernel (per TU, the loopback
        # bridge gets the lone build, a container of its own), no unit, and a key of its own.
        old, old_cache = self.fresh()
        with open(os.path.join(old, "manifest.json")) as f:
            doc = json.load(f)
        for e in doc["exports"]:
            e.pop("direct", None)
        with open(os.path.join(old, "manifest.json"), "w") as f:
            json.dump(doc, f)
        old_temps = os.path.join(os.path.dirname(old), "temps")
        self.link_json(old, "--arch", "sm_90", "--lto", "whole", "--save-temps", old_temps,
                       cache=old_cache)
        old_record = self.manifest(old)["links"][0]
        self.assertEqual(old_record["inputs"][1:], per_tu[1:])
        self.assertNotIn(old_record["inputs"][0], (whole[0], per_tu[0]))
        self.assertNotEqual(old_record["cache_key"], records["whole"]["cache_key"])
        self.assertFalse(os.path.exists(os.path.join(old_temps, "sm_90", "direct_calls.cu")))

    def test_a_hand_written_export_without_its_named_call_is_named_in_whole_mode(self):
        pkg, cache = self.fresh("hand")
        self.assertIs(self.manifest(pkg)["exports"][0].get("direct"), True)
        line, _ = self.link_fails(pkg, ["--arch", "sm_90", "--lto", "whole"],
                                  ["sm_90: nvJitLink failed", "handler 'twice' has an export "
                                   "record of version 2", "cudaq_rt_handler_call__<name>",
                                   "export it with CUDAQ_RT_EXPORT_HANDLER, or link per TU"])
        self.assertIn("cudaq_rt_handler_call__twice", line)
        # Per TU the table's pointer is all the kernel calls: it links.
        doc = self.link_json(pkg, "--arch", "sm_90", "--lto", "per-tu", cache=cache)
        self.assertEqual(doc["archs"][0]["lto"], "per-tu")

    def test_a_call_into_another_unit_is_a_real_call_per_tu(self):
        # decode.cu's parity calls bits.cu's popcount_bytes: compiled alone, decode.cu leaves the
        # call unresolved and the final link resolves it to bits.cu's definition, which the cubin
        # then defines as a function of its own. The whole-program link may inline it instead.
        pkg, cache = self.fresh()
        doc = self.link_json(pkg, "--arch", "sm_90", "--lto", "per-tu", "--no-cache", cache=cache)
        _, _, symbols = cubin_info(self.cubin(doc, "sm_90"))
        self.assertEqual(symbols.get("_Z14popcount_bytesPKhj"), "func")
        # Without bits.cu the per-TU link fails at the final link, naming the call.
        nobits, _ = self.fresh("nobits")
        line, stderr = self.link_fails(nobits, ["--arch", "sm_90", "--lto", "per-tu"],
                                       ["sm_90", "nvJitLink failed", "unresolved symbol",
                                        "popcount_bytes"], units_cached=True)
        self.assertIn("Undefined reference to '_Z14popcount_bytesPKhj' in 'decode.o#0'", stderr)

    def test_one_changed_unit_is_the_only_unit_compiled_again(self):
        pkg, cache = self.fresh()
        # -v on both: -verbose is part of every key.
        first = self.link_json(pkg, "--arch", "sm_90", "--lto", "per-tu", "-v", cache=cache)
        stats = lambda: json.loads(self.link("--cache-stats", "--json", cache=cache).stdout)["cache"]  # noqa: E731
        before = stats()
        self.assertEqual((before["units"]["hits"], before["units"]["misses"]), (0, 4))
        changed, _ = self.fresh("changed")
        r = self.link(changed, "--arch", "sm_90", "--lto", "per-tu", "--json", "-v", cache=cache)
        doc = json.loads(r.stdout)
        units = doc["archs"][0]["units"]
        self.assertFalse(doc["archs"][0]["cache_hit"])
        self.assertEqual([(u["name"], u["source"]) for u in units][1:],
                         [("arith.o#0", "cache"), ("decode.o#0", "cache"),
                          ("bits_changed.o#0", "compiled")])
        self.assertEqual(units[0]["source"], "cache")
        self.assertEqual([u["key"] for u in units[:3]],
                         [u["key"] for u in first["archs"][0]["units"][:3]])
        after = stats()
        self.assertEqual((after["units"]["hits"] - before["units"]["hits"],
                          after["units"]["misses"] - before["units"]["misses"]), (3, 1))
        # -v names each unit and where it came from.
        lines = [l for l in r.stderr.splitlines() if ": unit " in l]
        self.assertEqual(len(lines), 4, r.stderr)
        self.assertRegex(lines[1], r"^cudaq-rt-link: sm_90: unit arith\.o#0: cached  \d+ bytes")
        self.assertRegex(lines[3],
                         r"^cudaq-rt-link: sm_90: unit bits_changed\.o#0: compiled  \d+ bytes")
        # The same cubin as a link that compiles every unit afresh.
        cold = self.link_json(changed, "--arch", "sm_90", "--lto", "per-tu", "-v", "--no-cache",
                              "--no-store", cache=cache)
        self.assertEqual(self.cubin_digests(cold), self.cubin_digests(doc))
        symbols = cubin_info(self.blob(changed, doc["archs"][0]["cubin"]["digest"]))[2]
        self.assertIn("cudaq_rt_test_changed", symbols)
        text = self.link("--cache-stats", cache=cache).stdout
        self.assertRegex(text, r"unit hits +3\n")
        self.assertRegex(text, r"unit misses +5\n")

    def test_a_corrupt_unit_entry_is_a_miss(self):
        pkg, cache = self.fresh()
        first = self.link_json(pkg, "--arch", "sm_80", "--lto", "per-tu", "--no-store",
                               cache=cache)
        a = first["archs"][0]
        entry = lambda key: os.path.join(cache, "v1", key[7:9], key[7:])  # noqa: E731
        arith = next(u for u in a["units"] if u["name"] == "arith.o#0")
        data = bytearray(read(entry(arith["key"])))
        data[-20] ^= 0x01  # in the relocatable cubin
        with open(entry(arith["key"]), "wb") as f:
            f.write(data)
        os.remove(entry(a["cache_key"]))  # the module, so that the units are looked up
        before = json.loads(self.link("--cache-stats", "--json", cache=cache).stdout)["cache"]
        again = self.link_json(pkg, "--arch", "sm_80", "--lto", "per-tu", "--no-store",
                               cache=cache)
        sources = {u["name"]: u["source"] for u in again["archs"][0]["units"]}
        self.assertEqual(sources["arith.o#0"], "compiled")
        self.assertEqual(sorted(sources.values()), ["cache", "cache", "cache", "compiled"])
        self.assertEqual(self.cubin_digests(again), self.cubin_digests(first))
        after = json.loads(self.link("--cache-stats", "--json", cache=cache).stdout)["cache"]
        self.assertEqual(after["corrupt"], before["corrupt"] + 1)
        self.assertEqual(after["units"]["misses"], before["units"]["misses"] + 1)
        self.assertNotEqual(read(entry(arith["key"])), bytes(data), "the corrupt entry stayed")

    def test_forced_fallback_links_the_whole_program(self):
        pkg, cache = self.fresh()
        whole = self.link_json(pkg, "--arch", "sm_80", "--lto", "whole", "--no-cache",
                               "--no-store", cache=cache)
        env = cache_env(cache, CUDAQ_RT_FORCE_WHOLE_LINK="1")
        r = self.link(pkg, "--arch", "sm_80", "--lto", "per-tu", "--json", cache=cache, env=env)
        doc = json.loads(r.stdout)
        a = doc["archs"][0]
        self.assertEqual(doc["lto"], "per-tu")  # asked for
        self.assertEqual(a["lto"], "whole")     # done
        self.assertEqual(r.stderr.splitlines(), [
            "cudaq-rt-link: note: sm_80: per-TU link unavailable (CUDAQ_RT_FORCE_WHOLE_LINK is "
            "set): linked as a whole program"])
        self.assertEqual(a["fallback"], r.stderr.splitlines()[0].split("sm_80: ", 1)[1])
        self.assertNotIn("units", a)
        # The whole program with split compile: --lto whole's options and one more (its output
        # differs from run to run: nvJitLink 13.0), under a key of its own.
        self.assertEqual(a["options"], whole["archs"][0]["options"][:2]
                         + ["-split-compile-extended=0"] + whole["archs"][0]["options"][2:])
        self.assertNotEqual(a["cache_key"], whole["archs"][0]["cache_key"])
        _, _, symbols = cubin_info(self.cubin(doc, "sm_80"))
        self.assertEqual(symbols.get(KERNEL), "func")
        self.assertEqual(sorted(s for s in symbols if s.startswith("cudaq_rt_handler__")),
                         HANDLER_SYMBOLS)
        self.assertEqual([l["mode"] for l in self.manifest(pkg)["links"]], ["lto"])
        # Without it, the per-TU link runs (its module is not the whole program's).
        per_tu = self.link_json(pkg, "--arch", "sm_80", "--lto", "per-tu", cache=cache)
        self.assertEqual(per_tu["archs"][0]["lto"], "per-tu")
        self.assertFalse(per_tu["archs"][0]["cache_hit"])
        self.assertEqual([l["mode"] for l in self.manifest(pkg)["links"]], ["lto-per-tu"])

    def test_lto_mode_from_the_environment(self):
        pkg, cache = self.fresh()
        doc = json.loads(self.link(pkg, "--arch", "sm_80", "--dry-run", "--json", cache=cache,
                                   env=cache_env(cache, CUDAQ_RT_LTO="whole")).stdout)
        self.assertEqual(doc["lto"], "whole")
        flag = json.loads(self.link(pkg, "--arch", "sm_80", "--dry-run", "--json", "--lto",
                                    "per-tu", cache=cache,
                                    env=cache_env(cache, CUDAQ_RT_LTO="whole")).stdout)
        self.assertEqual(flag["lto"], "per-tu")
        self.assertNotEqual(flag["archs"][0]["cache_key"], doc["archs"][0]["cache_key"])
        self.link_fails(pkg, ["--arch", "sm_80"], ["CUDAQ_RT_LTO='fast'",
                                                   "expected per-tu or whole"],
                        env_extra={"CUDAQ_RT_LTO": "fast"})
        r = self.link(pkg, "--arch", "sm_80", "--lto", "fast", cache=cache, status=2)
        self.assertIn("--lto", r.stderr)

    def test_unresolved_symbol(self):
        # nvJitLink's own log says it: ptxas in a whole-program link, nvlink in the final link
        # of per-TU units (which names the unit).
        for mode, log in (("whole", "Unresolved extern function"),
                          ("per-tu", "Undefined reference to "
                                     "'_Z29cudaq_rt_test_defined_nowherePKhj' in "
                                     "'unresolved.o#0'")):
            pkg, _ = self.fresh("unresolved")
            line, stderr = self.link_fails(pkg, ["--arch", "sm_80", "--lto", mode],
                                           ["sm_80", "nvJitLink failed", "unresolved symbol",
                                            "cudaq_rt_test_defined_nowhere"], units_cached=True)
            notes = [l for l in stderr.splitlines() if l.startswith("cudaq-rt-link: note: ")]
            text = "\n".join(notes)
            self.assertIn(log, text)
            self.assertIn("note: inputs:", text)
            self.assertIn("dispatcher builtin", text)
            self.assertIn("bridge loopback", text)
            self.assertIn("unresolved.o#0", text)

    def test_blob_that_does_not_match_its_digest(self):
        pkg, _ = self.fresh()
        digest = self.base_manifest["containers"][1]["digest"]
        blob = blob_file(pkg, digest)
        data = bytearray(read(blob))
        data[len(data) // 2] ^= 0x40
        os.chmod(blob, 0o644)
        with open(blob, "wb") as f:
            f.write(data)
        self.link_fails(pkg, ["--arch", "sm_80"], [digest[7:], "does not match its digest"])

    def test_unknown_bridge(self):
        pkg, _ = self.fresh()
        self.link_fails(pkg, ["--arch", "sm_80", "--bridge", "nosuch"],
                        ["unknown bridge 'nosuch'"])

    def test_unknown_dispatcher(self):
        pkg, _ = self.fresh()
        self.link_fails(pkg, ["--arch", "sm_80", "--dispatcher", "nosuch"],
                        ["no dispatch kernel 'nosuch'", "builtin"])

    def test_a_built_in_kernel_takes_its_lone_build_where_the_bridge_exports_its_hooks(self):
        # The lone builds' compact loop (cudaq_rt_serve_lone) is compiled apart: a function of the
        # module per TU with the loopback bridge, which exports both hook sets
        # (CUDAQ_RT_EXPORT_BRIDGE_HOOKS(lone), (warp_lone)). A bridge with the three hooks only
        # gets the builds that call none of them; one that exports the unified kernel's set only
        # gets the unified kernel's lone build and the warp kernel's plain one; a whole-program
        # link takes no lone build (the plain direct form).
        pkg, cache = self.fresh()
        plain = self.path("libcudaq_rt_bridge_plain.o")
        unified_only = self.path("libcudaq_rt_bridge_unified_lone.o")
        kernels = {"builtin": KERNEL, "warp": "cudaq_rt_warp_dispatch"}
        for dispatcher, mode, bridge, lone in (
                ("builtin", "per-tu", "loopback", True), ("builtin", "per-tu", plain, False),
                ("builtin", "whole", "loopback", False), ("builtin", "whole", plain, False),
                ("warp", "per-tu", "loopback", True), ("warp", "per-tu", unified_only, False),
                ("builtin", "per-tu", unified_only, True), ("warp", "whole", "loopback", False)):
            doc = self.link_json(pkg, "--arch", "sm_90", "--lto", mode, "--bridge", bridge,
                                 "--dispatcher", dispatcher, cache=cache)
            _, _, symbols = cubin_info(self.cubin(doc, "sm_90"))
            where = (dispatcher, mode, bridge)
            self.assertEqual(symbols.get(kernels[dispatcher]), "func", where)
            self.assertEqual(any("cudaq_rt_serve_lone" in s for s in symbols), lone, where)

    def test_warp_dispatcher_links_concurrent_handlers(self):
        pkg, cache = self.fresh()
        r = run([LINK, pkg, "--arch", "sm_90", "--dispatcher", "warp"], cache_env(cache))
        self.assertEqual(r.returncode, 0, r.stderr)
        link, = self.manifest(pkg)["links"]
        self.assertEqual((link["arch"], link["dispatcher"]), ("sm_90", "warp"))
        self.assertTrue(all(e.get("concurrent") for e in self.manifest(pkg)["exports"]
                            if e["kind"] == "handler"))
        _, _, symbols = cubin_info(self.blob(pkg, link["cubin"]["digest"]))
        self.assertEqual(symbols.get("cudaq_rt_warp_dispatch"), "func")
        self.assertNotIn(KERNEL, symbols)
        for s in HANDLER_SYMBOLS:
            self.assertEqual(symbols.get(s), "object", s)

    def test_warp_dispatcher_refuses_a_handler_not_marked_concurrent(self):
        pkg, _ = self.fresh("extra")  # unused_kernel.cu's negate_i32 is a plain export
        self.link_fails(pkg, ["--arch", "sm_90", "--dispatcher", "warp"],
                        ["handler 'negate_i32' is not exported as safe to run concurrently",
                         "CUDAQ_RT_EXPORT_HANDLER_CONCURRENT"])

    def test_missing_package(self):
        d = tempfile.mkdtemp(dir=self.tmp, prefix="t.")
        pkg = os.path.join(d, "nosuch.cudaqpkg")
        self.link_fails(pkg, ["--arch", "sm_80"], [f"'{pkg}': ", "no such package"])
        self.assertEqual(os.listdir(d), [], "a missing package left a lock file behind")
        not_pkg = os.path.join(d, "empty.cudaqpkg")
        os.mkdir(not_pkg)
        self.link_fails(not_pkg, ["--arch", "sm_80"], ["not a package: no manifest.json"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
