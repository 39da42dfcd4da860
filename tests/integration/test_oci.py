#!/usr/bin/python3
"""Integration tests of packages through an OCI registry (cudaq-rt-package(5), "Registries"):
Debian's registry (the CNCF distribution server) started by the test on a loopback port, with and
without htpasswd basic auth and with a token service, and skopeo as the independent client.

Environment (set by ctest): CUDAQ_RT_PACK, CUDAQ_RT_LINK, CUDAQ_RT_EXAMPLE_APP; DOCKER_REGISTRY
and SKOPEO (else found on PATH; the tests skip without them).
"""
import json
import os
import re
import shutil
import tempfile
import unittest

from harness import EXAMPLE_APP, LINK, PACK, RUN, make_ed25519_keys, read, run, sha256, stored_forms
from registry import Registry, registry_available, skopeo, skopeo_available

NAME = "cudaq_rt_example_app"
TIMEOUT = 120  # a hang fails the test instead of the run


def layout_manifest_digest(pkg):
    """The digest index.json names: the package's image manifest."""
    with open(os.path.join(pkg, "index.json")) as f:
        index = json.load(f)
    assert len(index["manifests"]) == 1
    return index["manifests"][0]["digest"]


def blob_files(pkg):
    root = os.path.join(pkg, "blobs", "sha256")
    return {n: read(os.path.join(root, n)) for n in os.listdir(root)}


def uploaded_digests(reg, since=0):
    """The digests of the blob uploads the registry finished (PUT .../uploads/...?digest=...)."""
    out = []
    for r in reg.requests("PUT", r"/v2/[^?]*/blobs/uploads/", since=since):
        m = re.search(r"digest=sha256(?:%3A|:)([0-9a-f]{64})", r.path)
        if m and r.status == 201:
            out.append("sha256:" + m.group(1))
    return out


def put_blob(reg, repo, data):
    """Uploads `data` as a blob of REPO (monolithic: POST, then PUT with its digest)."""
    import urllib.request
    start = urllib.request.Request(f"http://{reg.url}/v2/{repo}/blobs/uploads/", method="POST",
                                   data=b"")
    with urllib.request.urlopen(start) as r:
        location = r.headers["Location"]
    if location.startswith("/"):
        location = f"http://{reg.url}{location}"
    sep = "&" if "?" in location else "?"
    put = urllib.request.Request(f"{location}{sep}digest={sha256(data)}", method="PUT", data=data,
                                 headers={"Content-Type": "application/octet-stream"})
    urllib.request.urlopen(put).close()


def put_artifact(reg, repo, tag, image, config_bytes):
    """Uploads `config_bytes` and the image manifest `image` (naming it as its config) under
    REPO:TAG, as a client that writes its own manifests would, with the distribution API."""
    import urllib.request
    image = dict(image, config=dict(image["config"], digest=sha256(config_bytes),
                                    size=len(config_bytes)))
    base = f"http://{reg.url}/v2/{repo}"
    put_blob(reg, repo, config_bytes)
    manifest = urllib.request.Request(
        f"{base}/manifests/{tag}", method="PUT", data=json.dumps(image).encode(),
        headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
    urllib.request.urlopen(manifest).close()


def image_manifest(pkg):
    return json.loads(read(os.path.join(pkg, "blobs", "sha256", layout_manifest_digest(pkg)[7:])))


@unittest.skipUnless(registry_available(), "no docker-registry (Debian's package of it)")
class RegistryTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cudaq-rt-oci-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def t(self, *parts):
        return os.path.join(self.tmp, *parts)

    def pack(self, out="out", *extra, env=None):
        r = run([PACK, EXAMPLE_APP, "-o", self.t(out), *extra], env=env, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        return self.t(out, NAME + ".cudaqpkg"), r

    def registry(self, **kw):
        reg = Registry(tmp=self.t("registry"), **kw)
        self.addCleanup(reg.close)
        return reg

    def assert_nothing_written(self, out):
        """A failed pull leaves no package and no temporary directory behind."""
        if os.path.isdir(out):
            left = [n for n in os.listdir(out) if not n.endswith(".lock")]
            self.assertEqual(left, [], "a failed pull left files behind")

    def test_layout_is_what_skopeo_reads_and_copies(self):
        """pack --push, then skopeo: the manifest it reads is the package's image manifest, byte
        for byte, and a copy back into a layout holds exactly the package's blobs."""
        reg = self.registry()
        pkg, r = self.pack("out", "--push", f"oci://{reg.url}/example:1")
        digest = layout_manifest_digest(pkg)
        self.assertIn(f"pushed  oci://{reg.url}/example:1@{digest}", r.stderr)
        raw = skopeo("inspect", "--raw", f"docker://{reg.url}/example:1", check=True).stdout
        self.assertEqual(sha256(raw.encode()), digest)
        manifest = json.loads(raw)
        self.assertEqual(manifest["artifactType"], "application/vnd.cudaq-rt.package.v1")
        self.assertEqual(manifest["config"]["digest"], sha256(read(os.path.join(pkg, "manifest.json"))))
        copy = self.t("copy")
        skopeo("copy", f"docker://{reg.url}/example:1", "oci:" + copy, check=True)
        ours = blob_files(pkg)
        theirs = blob_files(copy)
        self.assertEqual(theirs, {k: ours[k] for k in theirs})
        # Every blob of the package travelled except none: config, layers and manifest.
        self.assertEqual(set(theirs), set(ours))

    def test_skopeo_push_then_our_pull(self):
        """A package copied into the registry by skopeo from its layout is pulled by ours, and is
        the same package: every file, and --list accepts it."""
        reg = self.registry()
        pkg, _ = self.pack()
        skopeo("copy", "oci:" + pkg, f"docker://{reg.url}/viaskopeo:2", check=True)
        r = run([PACK, "--pull", f"oci://{reg.url}/viaskopeo:2", "-o", self.t("pulled")],
                timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        pulled = self.t("pulled", NAME + ".cudaqpkg")
        self.assertEqual(blob_files(pulled), blob_files(pkg))
        for f in ("manifest.json", "index.json", "oci-layout"):
            self.assertEqual(read(os.path.join(pulled, f)), read(os.path.join(pkg, f)), f)
        r = run([PACK, "--list", pulled], timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("handler echo", r.stdout)

    def test_relink_pushes_only_what_changed(self):
        """After a link, a push uploads the new blobs only (the cubin, the containers the link
        stored, the new config): the registry's log has no upload of a blob it already had."""
        reg = self.registry()
        pkg, _ = self.pack("out", "--push", f"oci://{reg.url}/example:1")
        before = set(blob_files(pkg))
        first = set(uploaded_digests(reg))
        mark = len(reg.requests())
        r = run([LINK, pkg, "--arch", "sm_90", "--no-cache", "--json", "--push",
                 f"oci://{reg.url}/example:1"], timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        push = json.loads(r.stdout)["push"]
        after = set(blob_files(pkg))
        new_layers = {"sha256:" + h for h in after - before}
        new_layers.discard(layout_manifest_digest(pkg))  # the manifest goes by PUT of a manifest
        second = uploaded_digests(reg, since=mark)
        self.assertEqual(sorted(second), sorted(new_layers))
        self.assertFalse(set(second) & first, "a blob the registry had was uploaded again")
        self.assertEqual(push["uploaded"], len(second))
        self.assertEqual(push["digest"], layout_manifest_digest(pkg))
        # A push of the package as it is uploads nothing.
        mark = len(reg.requests())
        r = run([LINK, pkg, "--push", f"oci://{reg.url}/example:1"], timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(" 0 uploaded (0 bytes)", r.stdout)
        self.assertEqual(uploaded_digests(reg, since=mark), [])

    def test_chunked_upload(self):
        """#chunk=4k: every blob beyond 4 KiB goes up in PATCHes of 4 KiB and a closing PUT (the
        registry's log counts them), and what arrives is the package: skopeo copies back the
        same blobs, and our pull gives the same package."""
        reg = self.registry()
        pkg, _ = self.pack("out", "--push", f"oci://{reg.url}/example:1#chunk=4k")
        image = layout_manifest_digest(pkg)
        sizes = {n: len(b) for n, b in blob_files(pkg).items() if "sha256:" + n != image}
        patches = reg.requests("PATCH", r"/v2/example/blobs/uploads/")
        self.assertTrue(all(p.status == 202 for p in patches), patches)
        self.assertEqual(len(patches), sum((size - 1) // 4096 for size in sizes.values()))
        self.assertGreater(len(patches), 0)
        self.assertEqual(sorted(uploaded_digests(reg)), sorted("sha256:" + n for n in sizes))
        copy = self.t("copy")
        skopeo("copy", f"docker://{reg.url}/example:1", f"oci:{copy}:1", check=True)
        self.assertEqual(blob_files(copy), blob_files(pkg))
        r = run([PACK, "--pull", f"oci://{reg.url}/example:1", "-o", self.t("p")],
                timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(blob_files(self.t("p", NAME + ".cudaqpkg")), blob_files(pkg))

    def test_https_with_the_registrys_own_ca(self):
        """A registry serving HTTPS with a certificate of a private CA: with #ca=FILE a push and
        a pull go over TLS; without it the system's store does not know the CA and the pull is
        one line that says so; plain HTTP to it is refused too."""
        reg = self.registry(tls=True)
        ref = f"oci://{reg.url}/example:1#ca={reg.ca}"
        pkg, _ = self.pack("out", "--push", ref)
        self.assertTrue(reg.requests("PUT", r"/v2/example/manifests/1"))
        r = run([PACK, "--pull", ref, "-o", self.t("p")], timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(blob_files(self.t("p", NAME + ".cudaqpkg")), blob_files(pkg))
        r = run([PACK, "--pull", f"oci://{reg.url}/example:1#https", "-o", self.t("q")],
                timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("certificate", r.stderr)
        self.assert_nothing_written(self.t("q"))
        r = run([PACK, "--pull", f"oci://{reg.url}/example:1", "-o", self.t("q")],
                timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assert_nothing_written(self.t("q"))

    def test_missing_tag_is_one_line(self):
        reg = self.registry()
        r = run([PACK, "--pull", f"oci://{reg.url}/example:nosuch", "-o", self.t("p")],
                timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertIn("no such manifest (MANIFEST_UNKNOWN", r.stderr)
        self.assert_nothing_written(self.t("p"))
        # With --json, the failure document on stdout.
        r = run([PACK, "--pull", f"oci://{reg.url}/example:nosuch", "-o", self.t("p"), "--json"],
                timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["exit_status"], 1)
        self.assertEqual(doc["input"], f"oci://{reg.url}/example:nosuch")
        self.assertIn("no such manifest", doc["error"])

    def test_blob_with_wrong_bytes_is_refused(self):
        """A registry serving a blob whose bytes do not match its digest (its storage flipped a
        byte): the pull fails naming the blob and writes nothing. (Packed --no-compress, so
        that the container's layer is the container.)"""
        reg = self.registry()
        pkg, _ = self.pack("out", "--no-compress", "--push", f"oci://{reg.url}/example:1")
        with open(os.path.join(pkg, "manifest.json")) as f:
            container = json.load(f)["containers"][0]["digest"]
        path = reg.blob_path(container)
        data = bytearray(read(path))
        data[len(data) // 2] ^= 0xFF
        with open(path, "wb") as f:
            f.write(data)
        out = self.t("p")
        r = run([PACK, "--pull", f"oci://{reg.url}/example:1", "-o", out], timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(f"blob {container[:19]} as served", r.stderr)
        self.assertIn("does not match its digest: refused", r.stderr)
        self.assert_nothing_written(out)

    def test_a_blob_declared_huge_is_refused_before_it_is_fetched(self):
        """An artifact whose config and image manifest say a container is 5 GiB (the registry
        would stream that much): the pull refuses it from the descriptor, at once, without a GET
        of the layer, and writes nothing."""
        reg = self.registry()
        pkg, _ = self.pack("out", "--no-compress", "--push", f"oci://{reg.url}/example:1")
        huge = 5 << 30
        config = json.loads(read(os.path.join(pkg, "manifest.json")))
        victim = config["containers"][0]["digest"]
        config["containers"][0]["size"] = huge
        image = image_manifest(pkg)
        for layer in image["layers"]:
            if layer["digest"] == victim:
                layer["size"] = huge
        put_artifact(reg, "example", "huge", image, json.dumps(config).encode())
        mark = len(reg.requests())
        out = self.t("p")
        r = run([PACK, "--pull", f"oci://{reg.url}/example:huge", "-o", out], timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn(f"blob {victim[:19]} is {huge} bytes by its descriptor, more than a "
                      "package's blob may be", r.stderr)
        self.assertNotIn(victim, " ".join(q.path for q in reg.requests("GET", since=mark)))
        self.assert_nothing_written(out)

    def test_a_compressed_blob_claimed_huge_is_refused_before_anything_is_written(self):
        """A config (the package's manifest) that records a compressed cubin as 1 TiB while its
        layer is the small frame it was: every reader would refuse the package, so the pull
        refuses it, at once, from the config, and writes nothing."""
        reg = self.registry()
        pkg, _ = self.linked_two_archs(reg)  # its cubins are stored compressed
        config = json.loads(read(os.path.join(pkg, "manifest.json")))
        link = config["links"][0]
        link["cubin"]["size"] = 1 << 40
        stored = {"digest": link["cubin"]["digest"]}
        put_artifact(reg, "example", "claim", image_manifest(pkg), json.dumps(config).encode())
        out = self.t("p")
        r = run([PACK, "--pull", f"oci://{reg.url}/example:claim", "-o", out], timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn(f"blob {stored['digest'][:19]} is recorded as {1 << 40} bytes, more than a "
                      "compressed blob may hold (1073741824): refused", r.stderr)
        self.assert_nothing_written(out)

    def test_more_signatures_than_a_package_may_have_are_refused_at_the_pull(self):
        """An artifact with 300 signature layers: a reader refuses a package of more than 256
        signatures, so the pull (with --verify too) refuses it before it fetches or writes."""
        reg = self.registry()
        pkg, _ = self.pack("out", "--push", f"oci://{reg.url}/example:1")
        image = image_manifest(pkg)
        for k in range(300):  # the registry takes a manifest only when its layers are there
            blob = json.dumps({"signature": k}).encode()
            put_blob(reg, "example", blob)
            image["layers"].append({
                "mediaType": "application/vnd.cudaq-rt.signature.v1+json",
                "digest": sha256(blob), "size": len(blob),
                "annotations": {"io.cudaq-rt.key-id": f"{k + 1:064x}"}})
        put_artifact(reg, "example", "many", image, read(os.path.join(pkg, "manifest.json")))
        keys = make_ed25519_keys(self.t("keys"), "ci")
        for extra in ([], ["--verify", keys["ci"][1]]):
            with self.subTest(extra=extra):
                out = self.t("p")
                r = run([PACK, "--pull", f"oci://{reg.url}/example:many", "-o", out, *extra],
                        timeout=TIMEOUT)
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                self.assertIn(": 300 signature layers, more than the 256 a package may have: "
                              "refused", r.stderr)
                self.assert_nothing_written(out)

    def test_registry_down(self):
        """A registry that is not there costs one line, at once, and nothing written."""
        reg = self.registry()
        self.pack("out", "--push", f"oci://{reg.url}/example:1")
        reg.stop()
        out = self.t("p")
        r = run([PACK, "--pull", f"oci://{reg.url}/example:1#timeout=2s", "-o", out],
                timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertIn("GET /v2/example/manifests/1", r.stderr)
        self.assert_nothing_written(out)

    def test_registry_that_stops_answering(self):
        """A registry that accepts connections and then says nothing (its process stopped with
        SIGSTOP): the pull fails after the stall bound with one line, not a hang, and writes
        nothing; once it answers again the pull works."""
        import signal
        import time
        reg = self.registry()
        self.pack("out", "--push", f"oci://{reg.url}/example:1")
        out = self.t("p")
        os.kill(reg.proc.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            r = run([PACK, "--pull", f"oci://{reg.url}/example:1#stall=1s", "-o", out],
                    timeout=TIMEOUT)
            waited = time.monotonic() - t0
        finally:
            os.kill(reg.proc.pid, signal.SIGCONT)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertIn("the registry stopped answering", r.stderr)
        self.assertLess(waited, TIMEOUT / 2)
        self.assert_nothing_written(out)
        r = run([PACK, "--pull", f"oci://{reg.url}/example:1", "-o", out], timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_bad_references_are_usage_errors(self):
        for ref, why in [("docker://x/y:1", "does not start with oci://"),
                         ("oci://127.0.0.1:5000", "no repository"),
                         ("oci://127.0.0.1:5000/Upper:1", "repository 'Upper'"),
                         ("oci://user:pw@127.0.0.1:5000/x:1", "credentials do not go"),
                         ("oci://127.0.0.1:5000/x:1#nope", "option 'nope'"),
                         ("oci://127.0.0.1:5000/x@sha256:12", "the digest after '@'")]:
            r = run([PACK, "--pull", ref, "-o", self.t("p")], timeout=TIMEOUT)
            self.assertEqual(r.returncode, 2, (ref, r.stderr))
            self.assertIn(why, r.stderr)
            r = run([LINK, self.t("none.cudaqpkg"), "--push", ref], timeout=TIMEOUT)
            self.assertEqual(r.returncode, 2, (ref, r.stderr))
            self.assertIn(why, r.stderr)

    def test_basic_auth(self):
        reg = self.registry(user="ci", password="s3cret")
        pkg, _ = self.pack()
        ref = f"oci://{reg.url}/example:1"
        r = run([LINK, pkg, "--push", ref], timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1)
        self.assertIn("HTTP 401", r.stderr)
        self.assertIn("add #basic-env=VAR", r.stderr)
        env = dict(os.environ, REG_AUTH="ci:wrong")
        r = run([LINK, pkg, "--push", ref + "#basic-env=REG_AUTH"], env=env, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1)
        self.assertIn("the credentials were refused", r.stderr)
        self.assertNotIn("wrong", r.stderr)
        env["REG_AUTH"] = "ci:s3cret"
        r = run([LINK, pkg, "--push", ref + "#basic-env=REG_AUTH"], env=env, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run([PACK, "--pull", ref + "#basic-env=REG_AUTH", "-o", self.t("p")], env=env,
                timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run([PACK, "--pull", ref + "#basic-env=UNSET_VAR", "-o", self.t("q")], env=env,
                timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1)
        self.assertIn("UNSET_VAR is unset or empty", r.stderr)

    def test_token_auth(self):
        """The registry's token flow: a 401 with a Bearer challenge, a token from its realm asked
        with the basic credentials, the request sent again."""
        reg = self.registry(user="ci", password="s3cret", token_auth=True)
        pkg, _ = self.pack()
        env = dict(os.environ, REG_AUTH="ci:s3cret")
        ref = f"oci://{reg.url}/example:1#basic-env=REG_AUTH"
        r = run([LINK, pkg, "--push", ref], env=env, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGreater(len(reg.token_requests), 0)
        r = run([PACK, "--pull", ref, "-o", self.t("p")], env=env, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        # A token service that grants pull only: the push is refused.
        reg.token_grant = {"pull"}
        r = run([LINK, pkg, "--arch", "sm_90", "--no-cache", "--push", ref], env=env,
                timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1)
        self.assertIn("HTTP 401", r.stderr)
        env["REG_AUTH"] = "ci:wrong"
        r = run([PACK, "--pull", ref, "-o", self.t("q")], env=env, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1)
        self.assertIn("the token service refused", r.stderr)

    def test_signed_package_travels(self):
        """The signature is a layer: after a pull, --verify checks it as it checks a local one;
        against another key the pulled package is refused and removed."""
        keys = make_ed25519_keys(self.t("keys"), "release", "other")
        reg = self.registry()
        env = dict(os.environ, CUDAQ_RT_SIGN_KEY=keys["release"][0])
        self.pack("out", "--push", f"oci://{reg.url}/example:s", env=env)
        r = run([PACK, "--pull", f"oci://{reg.url}/example:s", "-o", self.t("p"), "--verify",
                 keys["release"][1]], timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("verified: signed by trusted key", r.stdout)
        self.assertTrue(os.listdir(self.t("p", NAME + ".cudaqpkg", "signatures")))
        r = run([PACK, "--pull", f"oci://{reg.url}/example:s", "-o", self.t("q"), "--verify",
                 keys["other"][1]], timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1)
        self.assertIn("signed only by keys that are not trusted", r.stderr)
        self.assert_nothing_written(self.t("q"))
        # Refused with -f over a package that is there: that package stays as it was.
        kept = os.path.join(self.t("p"), NAME + ".cudaqpkg")
        before = blob_files(kept)
        r = run([PACK, "--pull", f"oci://{reg.url}/example:s", "-o", self.t("p"), "-f",
                 "--verify", keys["other"][1]], timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(blob_files(kept), before)
        self.assertTrue(os.path.exists(os.path.join(kept, "manifest.json")))

    def test_layouts_other_tools_wrote(self):
        """What `skopeo copy docker://... oci:DIR:TAG` writes opens with no file of ours: --list,
        --pull oci:DIR:TAG, cudaq-rt-link and cudaq-rt-run take it, by tag or as the only image;
        --list and cudaq-rt-link take oci:// references too, and a link of one pushes its copy."""
        keys = make_ed25519_keys(self.t("keys"), "release")
        reg = self.registry()
        env = dict(os.environ, CUDAQ_RT_SIGN_KEY=keys["release"][0],
                   CUDAQ_RT_CACHE_DIR=self.t("cache"))
        pkg, _ = self.pack("out", "--push", f"oci://{reg.url}/team/app:1", env=env)
        env.pop("CUDAQ_RT_SIGN_KEY")
        one, two = self.t("one"), self.t("two")
        skopeo("copy", f"docker://{reg.url}/team/app:1", f"oci:{one}:1", check=True)
        skopeo("copy", f"docker://{reg.url}/team/app:1", f"oci:{two}:1", check=True)
        skopeo("copy", f"docker://{reg.url}/team/app:1", f"oci:{two}:2", check=True)
        self.assertFalse(os.path.exists(os.path.join(one, "manifest.json")))
        # The only image, by directory; by tag; with its signature checked.
        for arg in (one, f"oci:{one}:1", f"oci:{two}:2"):
            r = run([PACK, "--list", arg, "--verify", keys["release"][1]], env=env,
                    timeout=TIMEOUT)
            self.assertEqual(r.returncode, 0, (arg, r.stderr))
            self.assertIn("handler echo", r.stdout)
            self.assertIn("verified: signed by trusted key", r.stdout)
        r = run([PACK, "--list", two], env=env, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, f"cudaq-rt-pack: error: '{two}/index.json': holds 2 images "
                                   "(1, 2): name one, oci:DIR:TAG\n")
        r = run([PACK, "--list", f"oci:{two}:3"], env=env, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1)
        self.assertIn("has no image '3'", r.stderr)
        # Pulled from the layout: the same package, file for file.
        r = run([PACK, "--pull", f"oci:{two}:1", "-o", self.t("pulled")], env=env,
                timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        pulled = self.t("pulled", NAME + ".cudaqpkg")
        self.assertEqual(blob_files(pulled), blob_files(pkg))
        for f in ("manifest.json", "index.json", "oci-layout"):
            self.assertEqual(read(os.path.join(pulled, f)), read(os.path.join(pkg, f)), f)
        # Linked and listed from the layout; the layout itself is not written.
        before = blob_files(one)
        r = run([LINK, one, "-a", "sm_80"], env=env, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"(?m)^sm_80  linked ")
        self.assertIn("nothing was written to it", r.stderr)
        self.assertEqual(blob_files(one), before)
        self.assertFalse(os.path.exists(os.path.join(one, "manifest.json")))
        r = run([RUN, f"oci:{one}:1", "--list", "--arch", "sm_80"], env=env, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("sm_80 (no GPU asked): would load from the cache", r.stdout)
        # A registry's reference: listed, and linked with its copy pushed under another tag.
        r = run([PACK, "--list", f"oci://{reg.url}/team/app:1"], env=env, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("handler echo", r.stdout)
        r = run([LINK, f"oci://{reg.url}/team/app:1", "-a", "sm_90", "--push",
                 f"oci://{reg.url}/team/app:2"], env=env, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("signature of key", r.stderr)  # the pushed copy is no longer signed
        r = run([PACK, "--list", f"oci://{reg.url}/team/app:2"], env=env, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"sm_90\s+lto-per-tu")
        # Nothing copied is left in the temporary directory.
        leftovers = [n for n in os.listdir(env.get("TMPDIR", "/tmp"))
                     if n.startswith(".cudaq-rt-copy.tmp-") and str(os.getpid()) in n]
        self.assertEqual(leftovers, [])

    def test_a_pull_by_digest_names_the_digest_once(self):
        reg = self.registry()
        pkg, _ = self.pack("out", "--push", f"oci://{reg.url}/example:1")
        digest = layout_manifest_digest(pkg)
        r = run([PACK, "--pull", f"oci://{reg.url}/example@{digest}", "-o", self.t("p")],
                timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith(f"pulled  oci://{reg.url}/example@{digest}: "),
                        r.stdout)
        self.assertEqual(r.stdout.count(digest), 1, r.stdout)

    def test_credentials_from_the_auth_file_skopeo_login_writes(self):
        reg = self.registry(user="ci", password="s3cret")
        pkg, _ = self.pack()
        env = dict(os.environ, REG_AUTH="ci:s3cret")
        r = run([LINK, pkg, "--push", f"oci://{reg.url}/example:1#basic-env=REG_AUTH"], env=env,
                timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        auth = self.t("auth.json")
        skopeo("login", "--authfile", auth, "-u", "ci", "-p", "s3cret", reg.url, check=True)
        ref = f"oci://{reg.url}/example:1"
        r = run([PACK, "--pull", ref, "-o", self.t("p")],
                env=dict(os.environ, REGISTRY_AUTH_FILE=auth), timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        # The same file where podman and skopeo look by default, under HOME.
        home = self.t("home")
        os.makedirs(os.path.join(home, ".config", "containers"))
        shutil.copy(auth, os.path.join(home, ".config", "containers", "auth.json"))
        clean = {k: v for k, v in os.environ.items()
                 if k not in ("REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "DOCKER_CONFIG")}
        r = run([PACK, "--pull", ref, "-o", self.t("q")], env=dict(clean, HOME=home),
                timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        # A wrong password in the file: refused, naming the file, never the secret.
        skopeo("login", "--authfile", self.t("wrong.json"), "-u", "ci", "-p", "wrong", reg.url)
        with open(self.t("wrong.json"), "w") as f:
            json.dump({"auths": {reg.url: {"auth": "Y2k6d3Jvbmc="}}}, f)  # ci:wrong
        r = run([PACK, "--pull", ref, "-o", self.t("w")],
                env=dict(clean, REGISTRY_AUTH_FILE=self.t("wrong.json")), timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"the credentials of '{self.t('wrong.json')}' were refused", r.stderr)
        self.assertNotIn("wrong", r.stderr.replace(self.t("wrong.json"), ""))

    def test_run_from_a_reference_fetches_once(self):
        """cudaq-rt-run oci://...: the first start pulls the package into the store under the
        cache directory, a second fetches the manifest only, --offline nothing; a registry that
        is down starts the stored copy with a warning. Without a GPU each start then stops at
        the GPU, which shows that the package was found and opened."""
        reg = self.registry()
        self.pack("out", "--push", f"oci://{reg.url}/example:1")
        cache = self.t("cache")
        ref = f"oci://{reg.url}/example:1"

        def start(*extra, reference=ref):
            mark = len(reg.requests()) if reg.running else 0
            r = run([RUN, reference, "--cache-dir", cache, "--call", "echo", "-v", *extra],
                    timeout=TIMEOUT)
            got = reg.requests(since=mark) if reg.running else []
            return r, [(q.method, q.path.split("?")[0]) for q in got]

        r, got = start()
        self.assertIn("pulled its manifest and signatures", r.stderr)
        self.assertEqual(got[0], ("GET", "/v2/example/manifests/1"))
        # The config only: the GPU (there is none) would have chosen what else to fetch.
        config = sha256(read(self.t("out", NAME + ".cudaqpkg", "manifest.json")))
        self.assertEqual([g for g in got if "/blobs/" in g[1]],
                         [("GET", "/v2/example/blobs/" + config)])
        stored = self.t("cache", "oci", "packages")
        (image,) = os.listdir(stored)
        pkg = os.path.join(stored, image, NAME + ".cudaqpkg")
        self.assertEqual(layout_manifest_digest(pkg), "sha256:" + image)
        with open(os.path.join(pkg, "manifest.json")) as f:
            for c in json.load(f)["containers"]:
                self.assertFalse(os.path.exists(os.path.join(pkg, "blobs", "sha256",
                                                             c["digest"][7:])))

        r, got = start()
        self.assertIn("stored copy", r.stderr)
        self.assertEqual(got, [("GET", "/v2/example/manifests/1")])

        reg.stop()
        r, _ = start()
        self.assertIn("starting the stored copy sha256:" + image[:12], r.stderr)
        r, _ = start("--offline")
        self.assertNotIn("warning", r.stderr)
        self.assertIn("stored copy", r.stderr)
        r, _ = start("--offline", reference=f"oci://{reg.url}/example:2")
        self.assertEqual(r.returncode, 1)
        self.assertIn("--offline, and no copy of it is stored", r.stderr)
        r, _ = start(reference=f"oci://{reg.url}/example:2")
        self.assertEqual(r.returncode, 1)
        self.assertIn("Couldn't connect", r.stderr)
        r = run([RUN, self.t("out", NAME + ".cudaqpkg"), "--offline", "--call", "echo"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--offline goes with an oci:// package", r.stderr)

    @unittest.skipUnless(os.environ.get("CUDAQ_RT_LIBRARY"), "no CUDAQ_RT_LIBRARY (libcudaq_rt.so)")
    def test_c_api_opens_a_reference(self):
        """cudaq_rt_open_package("oci://...") from a program of its own (ctypes over the installed
        library): the package pulled into the store under CUDAQ_RT_CACHE_DIR, its handlers
        listed; a missing tag fails with the registry's reason in cudaq_rt_last_error."""
        import ctypes
        reg = self.registry()
        self.pack("out", "--push", f"oci://{reg.url}/example:1")
        os.environ["CUDAQ_RT_CACHE_DIR"] = self.t("capi-cache")
        self.addCleanup(os.environ.pop, "CUDAQ_RT_CACHE_DIR", None)
        lib = ctypes.CDLL(os.environ["CUDAQ_RT_LIBRARY"])
        lib.cudaq_rt_last_error.restype = ctypes.c_char_p
        lib.cudaq_rt_code_handler.restype = ctypes.c_char_p
        lib.cudaq_rt_code_handler.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.cudaq_rt_code_destroy.argtypes = [ctypes.c_void_p]
        code = ctypes.c_void_p()
        rc = lib.cudaq_rt_open_package(f"oci://{reg.url}/example:1".encode(), ctypes.byref(code))
        self.assertEqual(rc, 0, lib.cudaq_rt_last_error())
        names = []
        while (name := lib.cudaq_rt_code_handler(code, len(names))) is not None:
            names.append(name.decode())
        lib.cudaq_rt_code_destroy(code)
        self.assertIn("echo", names)
        self.assertTrue(os.listdir(self.t("capi-cache", "oci", "packages")))
        rc = lib.cudaq_rt_open_package(f"oci://{reg.url}/example:9".encode(), ctypes.byref(code))
        self.assertNotEqual(rc, 0)
        self.assertIn(b"no such manifest", lib.cudaq_rt_last_error())

    def linked_two_archs(self, reg):
        """The example packed, linked for sm_80 and sm_90 and pushed as example:1; returns the
        package and, by arch, the layer of its cubin: the zstd frame the package stores it as
        (what a registry serves), digest and size."""
        pkg, _ = self.pack("out")
        r = run([LINK, pkg, "--arch", "sm_80,sm_90", "--cache-dir", self.t("link-cache"),
                 "--push", f"oci://{reg.url}/example:1"], timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        stored = stored_forms(pkg)
        with open(os.path.join(pkg, "manifest.json")) as f:
            cubins = {l["arch"]: l["cubin"] for l in json.load(f)["links"]}
        self.assertLessEqual({c["digest"] for c in cubins.values()}, set(stored))  # compressed
        links = {arch: {"digest": stored[c["digest"]][0], "size": stored[c["digest"]][1]}
                 for arch, c in cubins.items()}
        self.assertEqual(sorted(links), ["sm_80", "sm_90"])
        return pkg, links

    def test_a_start_fetches_only_its_archs_cubin(self):
        """cudaq-rt-run oci://... --list --arch sm_90 (what a start on an sm_90 GPU would load,
        asking no GPU) fetches the manifest, the config and the sm_90 cubin: not the sm_80 one,
        not the code it was linked from. A second asks the manifest only; --offline nothing,
        and an arch whose cubin no start read is then an error that says so."""
        reg = self.registry()
        pkg, links = self.linked_two_archs(reg)
        cache = self.t("cache")
        ref = f"oci://{reg.url}/example:1"

        def listing(arch, *extra):
            mark = len(reg.requests()) if reg.running else 0
            r = run([RUN, ref, "--list", "--arch", arch, "--cache-dir", cache, "--json", *extra],
                    timeout=TIMEOUT)
            got = reg.requests(since=mark) if reg.running else []
            return r, [(q.method, q.path.split("?")[0], q.size) for q in got]

        r, got = listing("sm_90")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["source"], "package")
        self.assertEqual(doc["arch"], "sm_90")
        self.assertIsNone(doc["device"])
        config = sha256(read(os.path.join(pkg, "manifest.json")))
        blobs = [(path.rsplit("/", 1)[1], size) for method, path, size in got
                 if "/blobs/" in path]
        self.assertEqual(blobs, [(config, os.path.getsize(os.path.join(pkg, "manifest.json"))),
                                 (links["sm_90"]["digest"], links["sm_90"]["size"])])
        fetched = sum(size for _, _, size in got)
        pushed = sum(os.path.getsize(os.path.join(pkg, "blobs", "sha256", n))
                     for n in os.listdir(os.path.join(pkg, "blobs", "sha256")))
        self.assertLess(fetched, pushed // 2, got)

        r, got = listing("sm_90")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([(m, p) for m, p, _ in got], [("GET", "/v2/example/manifests/1")])

        reg.stop()
        r, _ = listing("sm_90", "--offline")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["source"], "package")
        r, _ = listing("sm_80", "--offline")
        self.assertEqual(r.returncode, 1, r.stderr)
        doc = json.loads(r.stdout)
        self.assertFalse(doc["loadable"])
        self.assertIn(f"--offline: blob {links['sm_80']['digest'][:19]} is not stored",
                      doc["why_not"])

    def test_a_blob_is_fetched_once_across_image_manifests(self):
        """The package signed and pushed again as example:2 is another image manifest with the
        same cubins: its first start fetches its config and signature, not the sm_90 cubin that
        the start of example:1 stored, which both stored packages link."""
        reg = self.registry()
        pkg, links = self.linked_two_archs(reg)
        keys = make_ed25519_keys(self.t("keys"), "release")
        r = run([LINK, pkg, "--sign", keys["release"][0], "--push",
                 f"oci://{reg.url}/example:2"], timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        cache = self.t("cache")
        fetched = {}
        for tag in ("1", "2"):
            mark = len(reg.requests())
            r = run([RUN, f"oci://{reg.url}/example:{tag}", "--list", "--arch", "sm_90",
                     "--cache-dir", cache], timeout=TIMEOUT)
            self.assertEqual(r.returncode, 0, r.stderr)
            fetched[tag] = {q.path.rsplit("/", 1)[1] for q in reg.requests("GET", since=mark)
                            if "/blobs/" in q.path}
        cubin = links["sm_90"]["digest"]
        self.assertIn(cubin, fetched["1"])
        self.assertNotIn(cubin, fetched["2"])
        self.assertEqual(len(fetched["2"]), 2, fetched)  # the config and the signature
        stored = self.t("cache", "oci", "packages")
        inodes = {os.stat(os.path.join(stored, d, NAME + ".cudaqpkg", "blobs", "sha256",
                                       cubin[7:])).st_ino for d in os.listdir(stored)}
        self.assertEqual(len(os.listdir(stored)), 2)
        self.assertEqual(len(inodes), 1)

    def test_the_store_keeps_eight_packages_and_their_blobs(self):
        """Nine image manifests started in turn: the store keeps the eight used last; the first,
        the least recently used, goes, and so does the cubin only it had fetched."""
        reg = self.registry()
        pkg, links = self.linked_two_archs(reg)
        for n in range(2, 10):
            self.pack(f"out{n}", "--name", f"example{n}", "--push",
                      f"oci://{reg.url}/example:{n}")
        cache = self.t("cache")
        for n in range(1, 10):
            r = run([RUN, f"oci://{reg.url}/example:{n}", "--list", "--arch", "sm_90",
                     "--cache-dir", cache], timeout=TIMEOUT)
            self.assertEqual(r.returncode, 0, r.stderr)
            if n == 1:
                first = os.listdir(self.t("cache", "oci", "packages"))
                self.assertTrue(os.path.exists(self.t("cache", "oci", "blobs", "sha256",
                                                      links["sm_90"]["digest"][7:])))
        stored = os.listdir(self.t("cache", "oci", "packages"))
        self.assertEqual(len(stored), 8)
        self.assertNotIn(first[0], stored)
        self.assertFalse(os.path.exists(self.t("cache", "oci", "blobs", "sha256",
                                               links["sm_90"]["digest"][7:])))

    def test_run_refuses_wrong_bytes_and_stores_nothing(self):
        """A registry serving the chosen cubin with a byte changed: the start fails naming the
        blob, and the store keeps no copy of it."""
        reg = self.registry()
        pkg, links = self.linked_two_archs(reg)
        cubin = links["sm_90"]["digest"]
        path = reg.blob_path(cubin)
        with open(path, "r+b") as f:
            f.seek(40)
            b = f.read(1)
            f.seek(40)
            f.write(bytes([b[0] ^ 1]))
        cache = self.t("cache")
        r = run([RUN, f"oci://{reg.url}/example:1", "--cache-dir", cache, "--list", "--arch",
                 "sm_90"], timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"blob {cubin[:19]} as served", r.stdout + r.stderr)
        self.assertIn("does not match its digest: refused", r.stdout + r.stderr)
        stored = self.t("cache", "oci", "packages")
        for d in os.listdir(stored):
            blobs = os.path.join(stored, d, NAME + ".cudaqpkg", "blobs", "sha256")
            self.assertFalse(os.path.exists(os.path.join(blobs, cubin[7:])))

    def test_list_arch_is_list_only(self):
        r = run([RUN, self.t("nope.cudaqpkg"), "--call", "echo", "--arch", "sm_90"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--arch goes with --list", r.stderr)
        r = run([RUN, self.t("nope.cudaqpkg"), "--list", "--arch", "sm_9"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--arch:", r.stderr)
        r = run([RUN, "oci://127.0.0.1:1/example:1", "--call", "echo", "--store"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--store: not with an oci:// package", r.stderr)


class LayoutTest(unittest.TestCase):
    """The layout without a registry: kept current by every write, checked by --list."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cudaq-rt-layout-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def test_old_package_gains_layout_and_stale_layout_is_refused(self):
        out = os.path.join(self.tmp, "out")
        r = run([PACK, EXAMPLE_APP, "-o", out])
        self.assertEqual(r.returncode, 0, r.stderr)
        pkg = os.path.join(out, NAME + ".cudaqpkg")
        self.assertEqual(read(os.path.join(pkg, "oci-layout")), b'{"imageLayoutVersion":"1.0.0"}\n')
        # A package from before layouts: it lists (with a note) and gains one on its next write.
        os.remove(os.path.join(pkg, "index.json"))
        os.remove(os.path.join(pkg, "oci-layout"))
        r = run([PACK, "--list", pkg])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("no OCI image layout yet", r.stderr)
        r = run([LINK, pkg, "--arch", "sm_90", "--no-cache"])
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run([PACK, "--list", pkg])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("no OCI image layout", r.stderr)
        with open(os.path.join(pkg, "index.json")) as f:
            index = json.load(f)
        image = json.loads(read(os.path.join(pkg, "blobs", "sha256",
                                             index["manifests"][0]["digest"][7:])))
        cubins = [l for l in image["layers"]
                  if l["mediaType"] == "application/vnd.cudaq-rt.cubin.v1+zstd"]
        self.assertEqual(len(cubins), 1)
        self.assertEqual(cubins[0]["annotations"]["io.cudaq-rt.arch"], "sm_90")
        self.assertEqual(cubins[0]["annotations"]["io.cudaq-rt.dispatcher"], "builtin")
        # The image manifest's blob modified: refused.
        image_path = os.path.join(pkg, "blobs", "sha256", index["manifests"][0]["digest"][7:])
        saved = read(image_path)
        with open(image_path, "wb") as f:
            f.write(saved.replace(b"sm_90", b"sm_91"))
        r = run([PACK, "--list", pkg])
        self.assertEqual(r.returncode, 1)
        self.assertIn("blob does not match its digest", r.stderr)
        with open(image_path, "wb") as f:
            f.write(saved)
        # An index.json naming an image manifest that is not this package's (none in it, or
        # another manifest's): refused in one line, as cudaq-rt-package(5) says, since an OCI
        # client copying the layout would read another package.
        other_manifest = dict(image, config=dict(image["config"], digest="sha256:" + "1" * 64))
        other_bytes = json.dumps(other_manifest, sort_keys=True, separators=(",", ":")).encode()
        other_digest = sha256(other_bytes)
        with open(os.path.join(pkg, "blobs", "sha256", other_digest[7:]), "wb") as f:
            f.write(other_bytes)
        for named in ("sha256:" + "0" * 64, other_digest):
            with self.subTest(named=named):
                old = dict(index)
                old["manifests"] = [dict(index["manifests"][0], digest=named)]
                with open(os.path.join(pkg, "index.json"), "w") as f:
                    json.dump(old, f)
                r = run([PACK, "--list", pkg])
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertEqual(r.stdout, "")
                [line] = r.stderr.splitlines()
                self.assertTrue(line.startswith(
                    f"cudaq-rt-pack: error: '{pkg}/index.json': names image manifest "
                    f"{named[:19]}, which is not this package's"), line)
        os.remove(os.path.join(pkg, "blobs", "sha256", other_digest[7:]))


if __name__ == "__main__":
    unittest.main()
