#!/usr/bin/python3
"""Every JSON document the tools print, made for real and validated against its schema in schemas/:
cudaq-rt-link's link report, dry run, cache statistics, prune, --cache-push (against nginx with
WebDAV), --sign alone and --push alone (against Debian's docker-registry); cudaq-rt-pack --list
--json (the manifest) and --pull --json; cudaq-rt-run --list --arch; and the failure document of
each tool. Each document carries format_version 1. The GPU's documents (--call, --calls, --bench,
--serve, --list on a GPU) are validated by the GPU tests (tests/gpu/test_run.py, test_udp.py)
through the same schemas.

Environment (set by ctest): CUDAQ_RT_PACK, CUDAQ_RT_LINK, CUDAQ_RT_RUN, CUDAQ_RT_EXAMPLE_APP;
DOCKER_REGISTRY, NGINX (their parts skip without them).
"""
import ctypes
import json
import os
import shutil
import tempfile
import unittest

from harness import EXAMPLE_APP, LINK, PACK, RUN, make_ed25519_keys, run, validate_schema
from registry import Registry, registry_available
from test_remote_cache import Nginx, nginx_has_dav

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMAS = os.path.join(HERE, "../../schemas")
NAME = "cudaq_rt_example_app"
TIMEOUT = 300


def schema(name):
    return validate_schema.load(os.path.join(SCHEMAS, name + ".schema.json"))


class JsonContracts(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cudaq-rt-json-")
        cls.env = dict(os.environ, CUDAQ_RT_CACHE_DIR=os.path.join(cls.tmp, "cache"))
        for k in ("CUDAQ_RT_CACHE_DISABLE", "CUDAQ_RT_REMOTE_CACHE", "CUDAQ_RT_SIGN_KEY"):
            cls.env.pop(k, None)
        r = run([PACK, EXAMPLE_APP, "-o", os.path.join(cls.tmp, "out")], env=cls.env)
        assert r.returncode == 0, r.stderr
        cls.pkg = os.path.join(cls.tmp, "out", NAME + ".cudaqpkg")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def document(self, cmd, schema_name, status=0):
        """Runs cmd (with --json in it), checks its exit status and that stdout is one document
        valid against the schema, and returns it."""
        r = run(cmd, env=self.env, timeout=TIMEOUT)
        self.assertEqual(r.returncode, status, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(validate_schema.validate(schema(schema_name), doc), [], r.stdout)
        # The manifest has its own: 2 once a blob is stored compressed.
        want = 2 if schema_name == "manifest" and "stored" in doc else 1
        self.assertEqual(doc["format_version"], want)
        return doc

    def test_link_documents(self):
        report = self.document([LINK, self.pkg, "--arch", "sm_80,sm_90", "--json",
                                "--cache-stats"], "link")
        self.assertTrue(report["ok"])
        self.assertEqual([a["arch"] for a in report["archs"]], ["sm_80", "sm_90"])
        self.assertIn("cache", report)
        dry = self.document([LINK, self.pkg, "--arch", "sm_90", "--dry-run", "--json"], "link")
        self.assertTrue(dry["dry_run"])
        stats = self.document([LINK, "--cache-stats", "--json"], "link")
        self.assertGreater(stats["cache"]["entries"], 0)
        pruned = self.document([LINK, "--cache-prune", "0", "--json"], "link")
        self.assertGreater(pruned["pruned"]["entries"], 0)
        keys = make_ed25519_keys(os.path.join(self.tmp, "keys"), "k")
        signed = self.document([LINK, self.pkg, "--sign", keys["k"][0], "--json"], "link")
        self.assertRegex(signed["signed_by"], "^[0-9a-f]{64}$")
        # Each kind of document is one of the schema's, not several.
        link = schema("link")
        for doc, kind in ((report, "report"), (stats, "cache"), (signed, "signed")):
            for other in ("report", "cache", "cache_push", "signed", "pushed"):
                alone = dict(link, oneOf=[{"$ref": f"#/$defs/{other}"}])
                self.assertEqual(validate_schema.validate(alone, doc) == [], other == kind,
                                 (kind, other))

    def test_failures_are_error_documents(self):
        for cmd, status in (
                ([LINK, os.path.join(self.tmp, "nope.cudaqpkg"), "--arch", "sm_90", "--json"], 1),
                ([LINK, self.pkg, "--arch", "sm_9", "--json"], 2),
                ([PACK, "--list", os.path.join(self.tmp, "nope.cudaqpkg"), "--json"], 1),
                ([PACK, "--pull", "oci://127.0.0.1:1/x:1", "-o", os.path.join(self.tmp, "p"),
                  "--json"], 1),
                ([RUN, os.path.join(self.tmp, "nope.cudaqpkg"), "--list", "--arch", "sm_90",
                  "--json"], 1)):
            doc = self.document(cmd, "error", status)
            self.assertEqual(doc["exit_status"], status)

    def test_pack_list_is_the_manifest(self):
        self.document([PACK, "--list", self.pkg, "--json"], "manifest")

    def test_run_list_without_a_gpu(self):
        doc = self.document([RUN, self.pkg, "--list", "--arch", "sm_90", "--json"], "run")
        self.assertIsNone(doc["device"])
        self.assertEqual(doc["arch"], "sm_90")
        self.assertIn("echo", [h["name"] for h in doc["handlers"]])
        doc = self.document([RUN, self.pkg, "--list", "--arch", "sm_80,sm_90", "--json"], "run")
        self.assertEqual([t["arch"] for t in doc["targets"]], ["sm_80", "sm_90"])
        # A machine without a GPU and no --arch: the package alone, and why.
        try:
            ctypes.CDLL("libcuda.so.1")
        except OSError:
            no_gpu = self.document([RUN, self.pkg, "--list", "--json"], "run")
            self.assertEqual(no_gpu["targets"], [])
            self.assertIn("no CUDA driver", no_gpu["no_gpu"])
        self.document([RUN, self.pkg, "--json", "--bogus"], "error", 2)
        self.document([RUN, self.pkg, "--json"], "error", 2)

    @unittest.skipUnless(registry_available(), "no docker-registry (Debian's package of it)")
    def test_registry_documents(self):
        with Registry(tmp=os.path.join(self.tmp, "registry")) as reg:
            ref = f"oci://{reg.url}/example:1"
            pushed = self.document([LINK, self.pkg, "--push", ref, "--json"], "link")
            self.assertEqual(validate_schema.validate(schema("push"), pushed["push"]), [])
            self.assertGreater(pushed["push"]["uploaded"], 0)
            pulled = self.document([PACK, "--pull", ref, "-o", os.path.join(self.tmp, "pulled"),
                                    "--json"], "pull")
            self.assertEqual(pulled["digest"], pushed["push"]["digest"])

    @unittest.skipUnless(nginx_has_dav(), "no nginx with the dav module")
    def test_cache_push_document(self):
        linked = os.path.join(self.tmp, "linked")
        shutil.copytree(self.pkg, os.path.join(linked, NAME + ".cudaqpkg"))
        pkg = os.path.join(linked, NAME + ".cudaqpkg")
        self.document([LINK, pkg, "--arch", "sm_90", "--json"], "link")
        server = Nginx(os.path.join(self.tmp, "nginx"))
        try:
            doc = self.document([LINK, "--cache-push", pkg, "--remote-cache",
                                 server.url("cache"), "--json"], "link")
        finally:
            server.stop()
        self.assertEqual([p["arch"] for p in doc["pushed"]], ["sm_90"])


if __name__ == "__main__":
    unittest.main()
