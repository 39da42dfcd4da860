#!/usr/bin/python3
"""Integration tests of signed packages and signed cache entries (cudaq-rt-package(5),
"Signatures and trust"): keys made by OpenSSL's own tool, signatures checked by it too, the real
tools refusing what no trusted key signed, each refusal with its own line and before any GPU is
touched.

Environment (set by ctest): CUDAQ_RT_PACK, CUDAQ_RT_LINK, CUDAQ_RT_RUN, CUDAQ_RT_EXAMPLE_APP,
CUDAQ_RT_SIGNATURE_SCHEMA (schemas/signature.schema.json).
"""
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from harness import (EXAMPLE_APP, LINK, PACK, RUN, cache_env, check, make_ed25519_keys, read, read_blob, run,
                     validate_schema)

OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"
SIGNATURE_SCHEMA = os.environ.get(
    "CUDAQ_RT_SIGNATURE_SCHEMA",
    os.path.join(os.path.dirname(__file__), "../../schemas/signature.schema.json"))


def key_id(pub_pem_path):
    """SHA-256 of the raw 32-byte public key: the last 32 bytes of its DER form."""
    der = subprocess.run([OPENSSL, "pkey", "-pubin", "-in", pub_pem_path, "-outform", "DER"],
                         capture_output=True, check=True).stdout
    return hashlib.sha256(der[-32:]).hexdigest()


def message(package, manifest_digest):
    return b"cudaq-rt package signature v1\0" + package.encode() + b"\0" + manifest_digest.encode()


def write(path, data):
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


class TrustTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cudaq-rt-trust-test.")
        cls.keys = {name: (priv, pub, key_id(pub)) for name, (priv, pub) in
                    make_ed25519_keys(cls.tmp, "ci", "release", "stranger").items()}
        cls.cache = cls.path("cache")
        os.mkdir(cls.path("base"))
        # One package linked once, signed by ci; each test works on a copy.
        check([PACK, EXAMPLE_APP, "-n", "app", "-o", cls.path("base"), "--sign", cls.priv("ci")])
        check([LINK, cls.path("base", "app.cudaqpkg"), "-a", "sm_80", "--sign", cls.priv("ci")],
              env=cls.env())
        cls.schema = validate_schema.load(SIGNATURE_SCHEMA)
        cls.copies = 0

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def path(cls, *parts):
        return os.path.join(cls.tmp, *parts)

    @classmethod
    def priv(cls, name):
        return cls.keys[name][0]

    @classmethod
    def pub(cls, name):
        return cls.keys[name][1]

    @classmethod
    def kid(cls, name):
        return cls.keys[name][2]

    @classmethod
    def env(cls, cache=None, **extra):
        e = cache_env(cache or cls.cache, **extra)
        for k in ("CUDAQ_RT_TRUST", "CUDAQ_RT_SIGN_KEY", "CUDAQ_RT_REMOTE_CACHE"):
            e.pop(k, None)
        e.update(extra)
        return e

    def copy(self, name="app"):
        type(self).copies += 1
        d = self.path(f"copy{self.copies}")
        os.mkdir(d)
        shutil.copytree(self.path("base", "app.cudaqpkg"), os.path.join(d, name + ".cudaqpkg"))
        return os.path.join(d, name + ".cudaqpkg")

    def sig_path(self, pkg, key):
        return os.path.join(pkg, "signatures", self.kid(key) + ".json")

    def manifest_digest(self, pkg):
        return "sha256:" + hashlib.sha256(read(os.path.join(pkg, "manifest.json"))).hexdigest()

    def refusals(self, pkg, *trusted):
        """What each verifier says of pkg under the trusted keys: pack --list --verify, link
        --trust, run --trust (on any machine: the refusal comes before the GPU). Each refuses
        with exit status 1 and the same one line; the package is left as it was."""
        before = {f: read(os.path.join(r, f)) for r, _, fs in os.walk(pkg) for f in fs}
        verify = [a for k in trusted for a in ("--verify", self.pub(k))]
        trust = [a for k in trusted for a in ("--trust", self.pub(k))]
        lines = []
        for cmd in ([PACK, "--list", pkg, *verify],
                    [LINK, pkg, "-a", "sm_80", *trust],
                    [RUN, pkg, "--list", *trust],
                    [RUN, pkg, "--call", "echo", "--arg", "u32:1", *trust]):
            r = run(cmd, env=self.env())
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertEqual(r.stdout, "")
            err = r.stderr.splitlines()
            self.assertEqual(len(err), 1, r.stderr)
            tool = os.path.basename(cmd[0])
            self.assertTrue(err[0].startswith(f"{tool}: error: '{pkg}': "), err[0])
            lines.append(err[0].split(": error: ", 1)[1])
        self.assertEqual(len(set(lines)), 1, lines)
        after = {f: read(os.path.join(r, f)) for r, _, fs in os.walk(pkg) for f in fs}
        self.assertEqual(before, after)
        return lines[0][len(f"'{pkg}': "):]

    def test_a_signed_package_is_accepted_and_its_signature_is_standard_ed25519(self):
        pkg = self.copy()
        out = check([PACK, "--list", pkg, "--verify", self.pub("ci")])
        self.assertIn(f"verified: signed by trusted key {self.kid('ci')[:16]}\n", out)
        # The same from a directory of keys, and from CUDAQ_RT_TRUST (a ':' list) for link.
        keydir = self.path("keydir")
        os.makedirs(keydir, exist_ok=True)
        shutil.copy(self.pub("ci"), os.path.join(keydir, "ci.pem"))
        shutil.copy(self.pub("stranger"), os.path.join(keydir, "stranger.pub"))
        check([PACK, "--list", pkg, "--verify", keydir])
        r = run([LINK, pkg, "-a", "sm_80", "--json", "--no-store"],
                env=self.env(CUDAQ_RT_TRUST=self.pub("stranger") + ":" + keydir))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["verified_by"], self.kid("ci"))

        # The file is the schema's, and OpenSSL's own verifier accepts its signature over the
        # message the format names.
        sig = json.loads(read(self.sig_path(pkg, "ci")))
        self.assertEqual(validate_schema.validate(self.schema, sig), [])
        self.assertEqual((sig["package"], sig["key"]), ("app", self.kid("ci")))
        self.assertEqual(sig["manifest"], self.manifest_digest(pkg))
        write(self.path("msg.bin"), message("app", sig["manifest"]))
        write(self.path("sig.bin"), bytes.fromhex(sig["signature"]))
        check([OPENSSL, "pkeyutl", "-verify", "-pubin", "-inkey", self.pub("ci"), "-rawin",
               "-in", self.path("msg.bin"), "-sigfile", self.path("sig.bin")])

        # And a signature OpenSSL makes, filed as the format says, is one our verifier accepts.
        check([OPENSSL, "pkeyutl", "-sign", "-inkey", self.priv("release"), "-rawin",
               "-in", self.path("msg.bin"), "-out", self.path("release.sig")])
        made = dict(sig, key=self.kid("release"), signature=read(self.path("release.sig")).hex())
        write(self.sig_path(pkg, "release"), json.dumps(made))
        out = check([PACK, "--list", pkg, "--verify", self.pub("release")])
        self.assertIn(f"verified: signed by trusted key {self.kid('release')[:16]}\n", out)

    def test_each_way_to_fail_is_refused_with_its_own_line(self):
        ci = self.kid("ci")[:16]
        with self.subTest("unsigned"):
            pkg = self.copy()
            shutil.rmtree(os.path.join(pkg, "signatures"))
            self.assertEqual(self.refusals(pkg, "ci"),
                             "not signed: no signature in signatures/ (cudaq-rt-pack or "
                             "cudaq-rt-link --sign KEY signs a package)")
        with self.subTest("signed by a key that is not trusted"):
            self.assertEqual(self.refusals(self.copy(), "release", "stranger"),
                             f"signed only by keys that are not trusted: {ci} (trusted: "
                             f"{self.kid('release')[:16]}, {self.kid('stranger')[:16]})")
        with self.subTest("flipped signature"):
            pkg = self.copy()
            sig = json.loads(read(self.sig_path(pkg, "ci")))
            s = bytearray.fromhex(sig["signature"])
            s[17] ^= 0x20
            sig["signature"] = s.hex()
            write(self.sig_path(pkg, "ci"), json.dumps(sig))
            self.assertEqual(self.refusals(pkg, "ci"),
                             f"bad signature: the signature by trusted key {ci} does not verify "
                             "(it was altered, or made with another key)")
        with self.subTest("truncated signature"):
            pkg = self.copy()
            sig = json.loads(read(self.sig_path(pkg, "ci")))
            sig["signature"] = sig["signature"][:-2]
            write(self.sig_path(pkg, "ci"), json.dumps(sig))
            self.assertEqual(self.refusals(pkg, "ci"),
                             f"the signature by trusted key {ci} is malformed: "
                             f"signatures/{self.kid('ci')}.json: the signature is 63 bytes, not 64")
        with self.subTest("truncated file"):
            pkg = self.copy()
            text = read(self.sig_path(pkg, "ci"))
            write(self.sig_path(pkg, "ci"), text[:len(text) // 2])
            self.assertEqual(self.refusals(pkg, "ci"),
                             f"the signature by trusted key {ci} is malformed: "
                             f"signatures/{self.kid('ci')}.json: not a JSON object")
        with self.subTest("a blob replaced and the manifest re-hashed"):
            pkg = self.copy()
            mpath = os.path.join(pkg, "manifest.json")
            m = json.loads(read(mpath))
            old = m["links"][0]["cubin"]["digest"]
            forged = read_blob(pkg, old)
            forged = forged[:-1] + bytes([forged[-1] ^ 1])
            digest = "sha256:" + hashlib.sha256(forged).hexdigest()
            write(os.path.join(pkg, "blobs", "sha256", digest.split(":")[1]), forged)
            m["links"][0]["cubin"]["digest"] = digest
            if "stored" in m:  # the forged cubin is stored as it is
                m["stored"] = [s for s in m["stored"] if s["digest"] != old]
            text = json.dumps(m, indent=2) + "\n"
            write(mpath, text)
            line = self.refusals(pkg, "ci")
            self.assertEqual(line, f"manifest changed after signing: key {ci} signed manifest "
                                   f"{json.loads(read(self.sig_path(pkg, 'ci')))['manifest'][:19]}"
                                   f", the manifest is {self.manifest_digest(pkg)[:19]} (changed "
                                   "by a relink without --sign, or by hand)")
        with self.subTest("a manifest reordered"):
            pkg = self.copy()
            mpath = os.path.join(pkg, "manifest.json")
            m = json.loads(read(mpath))
            write(mpath, json.dumps(dict(reversed(list(m.items()))), indent=2) + "\n")
            self.assertTrue(self.refusals(pkg, "ci").startswith(
                f"manifest changed after signing: key {ci} signed manifest "))
        with self.subTest("a signature copied from another package"):
            other = self.path("other")
            os.makedirs(other, exist_ok=True)
            check([PACK, EXAMPLE_APP, "-n", "other", "-o", other, "--sign", self.priv("ci")])
            pkg = self.copy()
            shutil.copy(self.sig_path(os.path.join(other, "other.cudaqpkg"), "ci"),
                        self.sig_path(pkg, "ci"))
            self.assertEqual(self.refusals(pkg, "ci"),
                             f"the signature by trusted key {ci} is for package 'other', not "
                             "'app' (copied from another package)")

    def test_relink_and_resign(self):
        pkg = self.copy()
        # A relink signed by release: its signature is over the new manifest, ci's is now stale.
        r = run([LINK, pkg, "-a", "sm_90", "--sign", self.priv("release")], env=self.env())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"signed  key {self.kid('release')[:16]}\n", r.stdout)
        check([PACK, "--list", pkg, "--verify", self.pub("release")])
        self.assertIn("manifest changed after signing", self.refusals(pkg, "ci"))
        # --sign alone adds ci's signature to the package as it is; release's stays good.
        r = run([LINK, pkg, "--sign", self.priv("ci")], env=self.env())
        self.assertEqual((r.returncode, r.stdout), (0, f"signed  key {self.kid('ci')[:16]}\n"),
                         r.stderr)
        check([PACK, "--list", pkg, "--verify", self.pub("ci")])
        check([PACK, "--list", pkg, "--verify", self.pub("release")])
        self.assertEqual(sorted(os.listdir(os.path.join(pkg, "signatures"))),
                         sorted([self.kid("ci") + ".json", self.kid("release") + ".json"]))
        # A link without --sign rewrites the manifest: both signatures are stale, and say so.
        check([LINK, pkg, "-a", "sm_100"], env=self.env())
        self.assertIn("manifest changed after signing", self.refusals(pkg, "ci"))

    def test_bad_keys_are_errors_naming_where_they_came_from(self):
        pkg = self.copy()
        cases = [
            ([PACK, EXAMPLE_APP, "-o", self.path("k"), "--sign", self.pub("ci")], {},
             f"cudaq-rt-pack: error: --sign: '{self.pub('ci')}': is not a PEM private key"),
            ([PACK, EXAMPLE_APP, "-o", self.path("k")], {"CUDAQ_RT_SIGN_KEY": self.path("none")},
             f"cudaq-rt-pack: error: CUDAQ_RT_SIGN_KEY: '{self.path('none')}': no such key file"),
            ([LINK, pkg, "-a", "sm_80", "--trust", self.priv("ci")], {},
             f"cudaq-rt-link: error: --trust: '{self.priv('ci')}': is a private key where a "
             "public key was expected"),
            ([RUN, pkg, "--list"], {"CUDAQ_RT_TRUST": self.path("nokeys")},
             f"cudaq-rt-run: error: CUDAQ_RT_TRUST: '{self.path('nokeys')}': no such key file"),
        ]
        for cmd, extra, want in cases:
            r = run(cmd, env=self.env(**extra))
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertTrue(r.stderr.startswith(want), r.stderr)
        self.assertFalse(os.path.exists(self.path("k", "cudaq_rt_example_app.cudaqpkg")))
        # An RSA key is the wrong kind.
        check([OPENSSL, "genpkey", "-algorithm", "rsa", "-pkeyopt", "rsa_keygen_bits:1024",
               "-out", self.path("rsa.pem")])
        r = run([LINK, pkg, "--sign", self.path("rsa.pem")], env=self.env())
        self.assertEqual(r.returncode, 1)
        self.assertIn("is an RSA key: cudaq-rt signs and verifies with Ed25519 only", r.stderr)

    def link_json(self, pkg, cache, *args):
        r = run([LINK, pkg, "-a", "sm_80", "--json", "--no-store", "--lto", "whole", *args],
                env=self.env(cache))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return json.loads(r.stdout)["archs"][0]

    def cache_stats(self, cache):
        r = run([LINK, "--cache-stats", "--json"], env=self.env(cache))
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["cache"]

    def test_cache_entries_under_trust(self):
        pkg = self.copy()
        trust_ci = ["--trust", self.pub("ci")]
        for name, signer in (("unsigned", []), ("foreign", ["--sign", self.priv("stranger")])):
            with self.subTest(name):
                cache = self.path("cache-" + name)
                first = self.link_json(pkg, cache, *signer)
                self.assertEqual(first["source"], "link")
                self.assertEqual(self.link_json(pkg, cache, *signer)["source"], "cache")
                # Whole, but no trusted key signed it: a miss, linked again, the same cubin.
                again = self.link_json(pkg, cache, *trust_ci)
                self.assertEqual(again["source"], "link")
                self.assertEqual(again["cubin"]["digest"], first["cubin"]["digest"])
                stats = self.cache_stats(cache)
                self.assertEqual((stats["untrusted"], stats["corrupt"]), (1, 0))
                # Signed by ci as it is stored: from then on, a hit under --trust.
                self.link_json(pkg, cache, *trust_ci, "--sign", self.priv("ci"))
                hit = self.link_json(pkg, cache, *trust_ci)
                self.assertEqual(hit["source"], "cache")
                self.assertEqual(hit["cubin"]["digest"], first["cubin"]["digest"])
                # The entry itself carries the signature: 96 bytes after the cubin.
                key = hit["cache_key"].split(":")[1]
                entry = read(os.path.join(cache, "v1", key[:2], key))
                self.assertEqual(int.from_bytes(entry[12:16], "little"), 96)
                self.assertEqual(entry[-96:-64].hex(), self.kid("ci"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
