#!/usr/bin/python3
"""Integration tests of the remote link cache: cudaq-rt-link against a real nginx with WebDAV PUT,
started here on a free loopback port, and against Python servers that misbehave.

Environment (set by ctest): CUDAQ_RT_PACK, CUDAQ_RT_LINK, NVCC, CUDAQ_RT_INCLUDE, NGINX (the
nginx binary; the tests skip without one that has the dav module). Every "machine" is a link cache
directory of its own; the remote cache is shared.
"""
import base64
import concurrent.futures
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from harness import DEVICE_FLAGS, HANDLERS, LINK, NVCC, PACK, check, make_ed25519_keys, read

NGINX = os.environ.get("NGINX") or shutil.which("nginx") or "/usr/sbin/nginx"
TOKEN = "s3cr3t-t0ken-4c1d"


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def chunked_sha256(data):
    """base/digest.h's chunked SHA-256: SHA-256 over a label, the size and the 1 MiB chunks'
    SHA-256s in order."""
    chunk = 1 << 20
    h = hashlib.sha256(b"cudaq-rt chunked sha256 v1\0" + len(data).to_bytes(8, "little"))
    for at in range(0, len(data), chunk):
        h.update(hashlib.sha256(data[at:at + chunk]).digest())
    return h.digest()


def entry_cubin(data, key):
    """The cubin's digest from a whole, self-consistent entry file for `key`, else None. Format 2
    (a remote entry) holds the cubin as a zstd frame, read back here by the zstd command-line
    tool, under its SHA-256; format 3 (a local one) as it is, under its chunked SHA-256; format 1
    as it is, under its SHA-256."""
    if len(data) < 128 or data[:8] != b"CQRTLNK\0" or data[16:48].hex() != key.split(":")[-1]:
        return None
    version = int.from_bytes(data[8:12], "little")
    m, c = int.from_bytes(data[48:56], "little"), int.from_bytes(data[56:64], "little")
    signatures = int.from_bytes(data[12:16], "little")  # 96 bytes each, after the payload
    payload = data[128 + m:128 + m + c]
    if len(data) != 128 + m + c + signatures or version not in (1, 2, 3):
        return None
    cubin = payload
    if version == 2:
        r = subprocess.run(["zstd", "-d", "-c", "-q"], input=payload, capture_output=True)
        if r.returncode != 0:
            return None
        cubin = r.stdout
    digest = chunked_sha256(cubin) if version == 3 else hashlib.sha256(cubin).digest()
    if digest != data[64:96]:
        return None
    return "sha256:" + hashlib.sha256(cubin).hexdigest()


def reencoded(data, key):
    """The entry file `data` (of any key) made over for `key`: the same metadata and payload,
    every field and digest consistent, as a writer who knows the format would make it."""
    m, c = int.from_bytes(data[48:56], "little"), int.from_bytes(data[56:64], "little")
    metadata, payload = data[128:128 + m], data[128 + m:128 + m + c]
    head = (b"CQRTLNK\0" + data[8:16] + bytes.fromhex(key.split(":")[-1]) + data[48:64] +
            data[64:96])
    return head + hashlib.sha256(head + metadata).digest() + metadata + payload


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nginx_has_dav():
    try:
        r = subprocess.run([NGINX, "-V"], capture_output=True, text=True)
    except OSError:
        return False
    return "http_dav_module" in r.stderr + r.stdout


NGINX_CONF = """
{user}
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
events {{ worker_connections 256; }}
http {{
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  log_format auth '$request_method $uri $status "$http_authorization"';
  access_log {tmp}/access.log auth;
  client_max_body_size 64m;
  server {{
    listen 127.0.0.1:{port};
    root {tmp}/root;
    location /cache/ {{
      dav_methods PUT DELETE;
      create_full_put_path on;
      dav_access user:rw group:r all:r;
    }}
    location /ro/ {{
      limit_except GET {{ deny all; }}
    }}
    location /fail/ {{
      return 500;
    }}
  }}
}}
"""


class Nginx:
    """nginx with a WebDAV location, run as the current user in the foreground."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.root = os.path.join(tmp, "root")
        os.makedirs(self.root)
        for attempt in range(5):
            self.port = free_port()
            with open(os.path.join(tmp, "nginx.conf"), "w") as f:
                f.write(NGINX_CONF.format(tmp=tmp, port=self.port,
                                          user="user root;" if os.geteuid() == 0 else ""))
            self.proc = subprocess.Popen([NGINX, "-p", tmp, "-c", os.path.join(tmp, "nginx.conf")],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.time() + 10
            while time.time() < deadline and self.proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                    return
                except OSError:
                    time.sleep(0.05)
            self.stop()
        raise RuntimeError("nginx did not start: " + read(os.path.join(tmp, "error.log")).decode())

    def url(self, location):
        return f"http://127.0.0.1:{self.port}/{location}"

    def entry(self, location, key):
        return os.path.join(self.root, location, key.split(":")[-1])

    def access_log(self):
        return read(os.path.join(self.tmp, "access.log")).decode()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


class SilentServer:
    """Accepts connections and never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.done = False
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while not self.done:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)

    def stop(self):
        self.done = True
        self.sock.close()
        for c in self.conns:
            c.close()


@unittest.skipUnless(nginx_has_dav(), "no nginx with the dav module")
class RemoteCacheTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cudaq-rt-remote-test.")
        t = cls.path
        compiles = [[NVCC, *DEVICE_FLAGS, "-c", os.path.join(HANDLERS, n + ".cu"), "-o", t(n + ".o")]
                    for n in ("arith", "bits")]
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:
            list(ex.map(check, compiles))
        os.mkdir(t("pkgs"))
        check([PACK, "-o", t("pkgs"), "-n", "app", t("arith.o"), t("bits.o")])
        cls.pkg = t("pkgs/app.cudaqpkg")
        cls.server = Nginx(t("nginx"))
        cls.machines = 0

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def path(cls, *parts):
        return os.path.join(cls.tmp, *parts)

    def machine(self):
        """A fresh machine: an empty local cache of its own."""
        type(self).machines += 1
        return self.path(f"machine{self.machines}")

    def link(self, cache, remote, *args, env_extra=None, expect=0, pkg=None):
        env = dict(os.environ)
        env.pop("CUDAQ_RT_REMOTE_CACHE", None)
        env.pop("CUDAQ_RT_CACHE_DISABLE", None)
        env["CUDAQ_RT_CACHE_DIR"] = cache
        env["no_proxy"] = "127.0.0.1"  # libcurl honours http_proxy; the servers are local
        env.update(env_extra or {})
        store = "--store" in args
        args = [a for a in args if a != "--store"]
        cmd = [LINK, pkg or self.pkg, "--json", "-a", "sm_80", *args] + ([] if store else ["--no-store"])
        if remote:
            cmd += ["--remote-cache", remote]
        start = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        r.wall_s = time.perf_counter() - start
        self.assertEqual(r.returncode, expect, r.stdout + r.stderr)
        r.doc = json.loads(r.stdout) if r.stdout.strip() else None
        return r

    def stats(self, cache, remote):
        env = dict(os.environ, CUDAQ_RT_CACHE_DIR=cache)
        r = subprocess.run([LINK, "--cache-stats", "--json", "--remote-cache", remote],
                           capture_output=True, text=True, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["cache"]["remote"]

    def local_entry(self, cache, key):
        h = key.split(":")[-1]
        return os.path.join(cache, "v1", h[:2], h)

    def warnings(self, r):
        return [line for line in r.stderr.splitlines() if ": warning: " in line]

    def test_cold_store_then_remote_hit_on_a_second_machine(self):
        url = self.server.url("cache/hit")
        a = self.machine()
        cold = self.link(a, url)
        arch = cold.doc["archs"][0]
        self.assertEqual(arch["source"], "link")
        key = arch["cache_key"]
        # The server holds the entry compressed (format 2), the local cache plain (format 3):
        # the same cubin, each whole under the key.
        remote, local = read(self.server.entry("cache/hit", key)), read(self.local_entry(a, key))
        self.assertEqual((remote[8], local[8]), (2, 3))
        self.assertIsNotNone(entry_cubin(local, key))
        self.assertEqual(entry_cubin(remote, key), entry_cubin(local, key))
        b = self.machine()
        warm = self.link(b, url)
        hit = warm.doc["archs"][0]
        self.assertEqual(hit["source"], "remote")
        self.assertTrue(hit["cache_hit"])
        self.assertEqual(hit["cubin"]["digest"], arch["cubin"]["digest"])
        self.assertEqual(len(hit["remote_cache"]), 1)
        self.assertRegex(hit["remote_cache"][0], r"^remote cache: hit: GET sha256:[0-9a-f]{12}: \d+ bytes$")
        # link_ms is the first machine's link; this run only fetched.
        self.assertLess(hit["cubin"]["time_ms"], hit["cubin"]["link_ms"])
        self.assertEqual(self.warnings(warm), [])
        # Copied into the local cache as it was on the server; the next run is a local hit.
        self.assertEqual(read(self.local_entry(b, key)), remote)
        again = self.link(b, url)
        self.assertEqual(again.doc["archs"][0]["source"], "cache")
        s = self.stats(b, url)
        self.assertEqual((s["hits"], s["misses"], s["stores"], s["errors"]), (1, 0, 0, 0))
        self.assertEqual(s["bytes_in"], len(remote))
        s = self.stats(a, url)
        self.assertEqual((s["hits"], s["misses"], s["stores"], s["errors"]), (0, 1, 1, 0))
        self.assertEqual(s["bytes_out"], len(remote))

    def test_corrupt_remote_entries_are_misses_and_replaced(self):
        url = self.server.url("cache/corrupt")
        a = self.machine()
        first = self.link(a, url, "-a", "sm_90")
        key80, key90 = [x["cache_key"] for x in first.doc["archs"]]
        good = read(self.server.entry("cache/corrupt", key80))
        other = read(self.server.entry("cache/corrupt", key90))
        flipped = bytearray(good)
        flipped[len(good) - 100] ^= 0x40
        html = b"<html><head><title>Welcome</title></head><body>It works</body></html>\n"
        for name, bad in (("flipped byte", bytes(flipped)), ("truncated", good[:len(good) // 2]),
                          ("another key's entry", other), ("html page", html)):
            with self.subTest(name):
                write(self.server.entry("cache/corrupt", key80), bad)
                r = self.link(self.machine(), url)
                self.assertEqual(r.doc["archs"][0]["source"], "link")
                notes = r.doc["archs"][0]["remote_cache"]
                self.assertIn("are not a valid entry for this key", notes[0])
                self.assertIn("remote cache: stored", notes[1])
                self.assertEqual(self.warnings(r), [])
                self.assertEqual(entry_cubin(read(self.server.entry("cache/corrupt", key80)), key80),
                                 entry_cubin(good, key80))

    def test_a_body_larger_than_an_entry_can_be_is_refused_at_its_headers(self):
        # A hostile server: nginx serving a 2 GiB (sparse) file under the entry's URL, declared in
        # Content-Length. The client buffered it up to the local cache's limit (598 MB of RSS by
        # default, 2.17 GB with CUDAQ_RT_CACHE_MAXSIZE=0) and overran max-time; since b95327a it
        # refuses it at the headers: a miss, the link goes on, no memory spent on it.
        url = self.server.url("cache/huge")
        first = self.link(self.machine(), url)
        key = first.doc["archs"][0]["cache_key"]
        entry = self.server.entry("cache/huge", key)

        def measured(env_extra):
            probe = ("import json, resource, subprocess, sys, time\n"
                     "t = time.perf_counter()\n"
                     "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
                     "print(json.dumps({'rc': r.returncode, 'out': r.stdout, 'err': r.stderr,\n"
                     "  'wall': time.perf_counter() - t,\n"
                     "  'rss_kb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))\n")
            env = dict(os.environ, CUDAQ_RT_CACHE_DIR=self.machine(), no_proxy="127.0.0.1")
            env.pop("CUDAQ_RT_REMOTE_CACHE", None)
            env.update(env_extra)
            cmd = [sys.executable, "-c", probe, LINK, self.pkg, "--json", "-a", "sm_80",
                   "--no-store", "--remote-cache", url + "#max-time=3s"]
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
            return json.loads(r.stdout)

        for extra in ({}, {"CUDAQ_RT_CACHE_MAXSIZE": "0"}):
            with self.subTest(env=extra):
                with open(entry, "r+b") as f:  # the link's PUT replaced it with the real entry
                    f.truncate(2 << 30)
                r = measured(extra)
                self.assertEqual(r["rc"], 0, r["err"])
                arch = json.loads(r["out"])["archs"][0]
                self.assertEqual(arch["source"], "link")
                self.assertRegex(arch["remote_cache"][0],
                                 r"^remote cache: miss: GET sha256:[0-9a-f]{12}: the body "
                                 r"\(2147483648 bytes\) is larger than an entry can be "
                                 r"\(67108864 bytes\)")
                self.assertEqual([l for l in r["err"].splitlines() if ": warning: " in l], [])
                # What a link alone takes here, plus far less than the body: it was never read.
                self.assertLess(r["rss_kb"], 400 * 1024, r)
                print(f"\nhuge body {extra}: wall {r['wall']:.3f} s, max RSS "
                      f"{r['rss_kb'] / 1024:.0f} MB, link {arch['cubin']['link_ms']:.0f} ms",
                      file=sys.stderr)
                self.assertLess(r["wall"] - arch["cubin"]["link_ms"] / 1e3, 3.0)

    def test_a_valid_entry_whose_cubin_fails_the_checks_is_a_corrupt_miss(self):
        # The sm_90 module, in an entry made over for the sm_80 key: it decodes under the right
        # key, so only the link's checks of the cubin (its arch here) stand between it and the
        # load. It is a miss, counted corrupt, never copied into the local cache, and replaced.
        url = self.server.url("cache/wrongarch")
        first = self.link(self.machine(), url, "-a", "sm_90")
        key80, key90 = [x["cache_key"] for x in first.doc["archs"]]
        good80 = read(self.server.entry("cache/wrongarch", key80))
        forged = reencoded(read(self.server.entry("cache/wrongarch", key90)), key80)
        self.assertIsNotNone(entry_cubin(forged, key80))  # a whole entry for this key
        write(self.server.entry("cache/wrongarch", key80), forged)
        b = self.machine()
        r = self.link(b, url)
        arch = r.doc["archs"][0]
        self.assertEqual(arch["source"], "link")
        self.assertRegex(arch["remote_cache"][0],
                         r"^remote cache: miss: GET sha256:[0-9a-f]{12}: \d+ bytes that hold a "
                         r"cubin that fails the link's checks: ")
        self.assertEqual(entry_cubin(read(self.local_entry(b, key80)), key80),
                         entry_cubin(good80, key80))
        self.assertEqual(self.stats(b, url)["corrupt"], 1)

    def test_under_trust_an_entry_another_key_signed_is_a_miss(self):
        # A server that serves a valid entry, signed, but by a key this machine does not trust
        # (another tenant's, or the server's own): a miss, never copied, and the link here gives
        # the right cubin. Once a trusted key signed the entry, it is a remote hit.
        keys = self.path("keys")
        make_ed25519_keys(keys, "mine", "theirs")
        pkg = self.path("signed", "app.cudaqpkg")
        shutil.copytree(self.pkg, pkg)
        check([LINK, pkg, "--sign", f"{keys}/mine.pem"])
        url = self.server.url("cache/trust")
        theirs = self.link(self.machine(), url, "--sign", f"{keys}/theirs.pem", pkg=pkg)
        key = theirs.doc["archs"][0]["cache_key"]
        digest = theirs.doc["archs"][0]["cubin"]["digest"]
        served = read(self.server.entry("cache/trust", key))
        self.assertIsNotNone(entry_cubin(served, key))  # whole, and signed
        self.assertEqual(int.from_bytes(served[12:16], "little"), 96)
        b = self.machine()
        r = self.link(b, url, "--trust", f"{keys}/mine.pub", pkg=pkg)
        arch = r.doc["archs"][0]
        self.assertEqual(arch["source"], "link")
        self.assertRegex(arch["remote_cache"][0],
                         r"^remote cache: miss: GET sha256:[0-9a-f]{12}: \d+ bytes of an entry no "
                         r"trusted key signed$")
        self.assertEqual(arch["cubin"]["digest"], digest)
        s = self.stats(b, url)
        self.assertEqual((s["untrusted"], s["corrupt"], s["hits"]), (1, 0, 0))
        # Signed by a trusted key as it is stored: the next machine that trusts it hits.
        self.link(self.machine(), url, "--trust", f"{keys}/mine.pub", "--sign",
                  f"{keys}/mine.pem", pkg=pkg)
        c = self.machine()
        r = self.link(c, url, "--trust", f"{keys}/mine.pub", pkg=pkg)
        self.assertEqual(r.doc["archs"][0]["source"], "remote")
        self.assertEqual(r.doc["archs"][0]["cubin"]["digest"], digest)

    def test_server_down(self):
        port = free_port()  # nothing listens there
        r = self.link(self.machine(), f"http://127.0.0.1:{port}/cache", "-a", "sm_90")
        self.assertEqual([a["source"] for a in r.doc["archs"]], ["link", "link"])
        w = self.warnings(r)
        self.assertEqual(len(w), 1, r.stderr)  # one per process, not one per arch
        self.assertIn("remote cache http://127.0.0.1", w[0])
        self.assertIn("linking locally", w[0])

    def test_server_that_never_answers_costs_at_most_max_time(self):
        silent = SilentServer()
        try:
            a = self.machine()
            r = self.link(a, f"http://127.0.0.1:{silent.port}/c#timeout=200ms,max-time=1s")
        finally:
            silent.stop()
        arch = r.doc["archs"][0]
        self.assertEqual(arch["source"], "link")
        self.assertEqual(len(self.warnings(r)), 1, r.stderr)
        self.assertIn("Operation timed out", r.stderr)
        # What the run spent besides the link: the one GET that waited out max-time, and the
        # process's own start. The PUT is not tried: the server is off for the process.
        waited = r.wall_s - arch["cubin"]["link_ms"] / 1e3
        print(f"\nsilent server: wall {r.wall_s:.3f} s, link {arch['cubin']['link_ms']:.0f} ms, "
              f"rest {waited:.3f} s (max-time 1 s)", file=sys.stderr)
        self.assertGreaterEqual(waited, 0.95)
        # The process's own start is a fraction of a second on an idle machine; the bound leaves
        # room for a loaded CI machine while still telling max-time from a wait without end.
        self.assertLess(waited, 3.5)

    def test_403_on_put_is_read_only(self):
        url = self.server.url("ro/x")
        r = self.link(self.machine(), url, "-a", "sm_90")
        self.assertEqual([a["source"] for a in r.doc["archs"]], ["link", "link"])
        w = self.warnings(r)
        self.assertEqual(len(w), 1, r.stderr)
        self.assertIn("HTTP 403", w[0])
        self.assertFalse(os.path.exists(os.path.join(self.server.root, "ro")))

    def test_read_only_option_never_puts(self):
        url = self.server.url("cache/readonly")
        r = self.link(self.machine(), url + "#read-only")
        self.assertEqual(r.doc["archs"][0]["source"], "link")
        self.assertEqual(self.warnings(r), [])
        self.assertNotIn("PUT /cache/readonly/", self.server.access_log())
        self.assertIn("GET /cache/readonly/", self.server.access_log())

    def test_500s(self):
        a = self.machine()
        url = self.server.url("fail/x")
        r = self.link(a, url)
        self.assertEqual(r.doc["archs"][0]["source"], "link")
        w = self.warnings(r)
        self.assertEqual(len(w), 1, r.stderr)
        self.assertIn("HTTP 500", w[0])
        s = self.stats(a, url)
        self.assertEqual((s["hits"], s["stores"], s["errors"]), (0, 0, 2))  # the GET and the PUT

    def test_eight_concurrent_linkers_of_one_key(self):
        url = self.server.url("cache/eight")
        caches = [self.machine() for _ in range(8)]
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as ex:
            runs = list(ex.map(lambda c: self.link(c, url), caches))
        digests = {r.doc["archs"][0]["cubin"]["digest"] for r in runs}
        self.assertEqual(len(digests), 1)
        for r in runs:
            self.assertEqual(self.warnings(r), [], r.stderr)
        key = runs[0].doc["archs"][0]["cache_key"]
        # Whichever PUT came last, the server holds a whole entry for this cubin (the metadata,
        # with each machine's link time, differs).
        self.assertEqual(entry_cubin(read(self.server.entry("cache/eight", key)), key), digests.pop())
        late = self.link(self.machine(), url)
        self.assertEqual(late.doc["archs"][0]["source"], "remote")

    def test_auth_header_reaches_the_server_and_no_output(self):
        url = self.server.url("cache/auth")
        a = self.machine()
        env = {"CUDAQ_RT_TEST_TOKEN": TOKEN, "CUDAQ_RT_TEST_BASIC": "alice:" + TOKEN}
        r = self.link(a, url + "#bearer-env=CUDAQ_RT_TEST_TOKEN", "-v", "--cache-stats",
                      env_extra=env)
        log = self.server.access_log()
        self.assertIn(f'GET /cache/auth/', log)
        self.assertIn(f'"Bearer {TOKEN}"', log)
        r2 = self.link(self.machine(), url + "#basic-env=CUDAQ_RT_TEST_BASIC", "-v",
                       env_extra=env)
        self.assertEqual(r2.doc["archs"][0]["source"], "remote")
        basic = base64.b64encode(("alice:" + TOKEN).encode()).decode()
        self.assertIn(f'"Basic {basic}"', self.server.access_log())
        for out in (r.stdout, r.stderr, r2.stdout, r2.stderr):
            self.assertNotIn(TOKEN, out)
            self.assertNotIn(basic, out)
        # Nor in the link record the package keeps, nor in the local cache.
        stored = self.link(a, url + "#bearer-env=CUDAQ_RT_TEST_TOKEN", "--store", env_extra=env)
        manifest = read(os.path.join(self.pkg, "manifest.json")).decode()
        self.assertNotIn(TOKEN, manifest)
        for dirpath, _, files in os.walk(a):
            for f in files:
                self.assertNotIn(TOKEN.encode(), read(os.path.join(dirpath, f)))
        # An unset variable is an error naming it, not a request without credentials.
        bad = self.link(a, url + "#bearer-env=CUDAQ_RT_TEST_UNSET", expect=1)
        self.assertIn("CUDAQ_RT_TEST_UNSET is unset or empty", bad.stderr)
        self.assertIsNotNone(stored.doc)

    def test_cache_push_warms_the_fleet(self):
        ci = self.machine()
        env = dict(os.environ, CUDAQ_RT_CACHE_DIR=ci)
        pkg = self.path("pushpkg")
        shutil.copytree(self.pkg, pkg)
        check([LINK, pkg, "-a", "sm_80,sm_90", "--no-cache"])  # AOT link, no remote involved
        url = self.server.url("cache/push")
        r = subprocess.run([LINK, "--cache-push", pkg, "--remote-cache", url, "--json"],
                           capture_output=True, text=True, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        pushed = json.loads(r.stdout)["pushed"]
        self.assertEqual([p["arch"] for p in pushed], ["sm_80", "sm_90"])
        manifest = json.loads(read(os.path.join(pkg, "manifest.json")))
        fleet = self.link(self.machine(), url, "-a", "sm_90")
        for a in fleet.doc["archs"]:
            self.assertEqual(a["source"], "remote")
            rec = [x for x in manifest["links"] if x["arch"] == a["arch"]][0]
            self.assertEqual(a["cubin"]["digest"], rec["cubin"]["digest"])
        # No remote cache to push to: an error.
        r = subprocess.run([LINK, "--cache-push", pkg], capture_output=True, text=True, env=env)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no remote cache to push to", r.stderr)

    def test_environment_variable_and_disable(self):
        url = self.server.url("cache/env")
        a = self.machine()
        r = self.link(a, None, env_extra={"CUDAQ_RT_REMOTE_CACHE": url})
        key = r.doc["archs"][0]["cache_key"]
        self.assertTrue(os.path.exists(self.server.entry("cache/env", key)))
        # --remote-cache wins over the variable.
        r = self.link(self.machine(), self.server.url("cache/env2"),
                      env_extra={"CUDAQ_RT_REMOTE_CACHE": url})
        self.assertEqual(r.doc["archs"][0]["source"], "link")
        # CUDAQ_RT_CACHE_DISABLE and --no-cache turn the remote cache off too.
        before = self.server.access_log().count("/cache/env/")
        for extra, args in (({"CUDAQ_RT_CACHE_DISABLE": "1"}, ()), ({}, ("--no-cache",))):
            r = self.link(self.machine(), None, *args,
                          env_extra={"CUDAQ_RT_REMOTE_CACHE": url, **extra})
            self.assertEqual(r.doc["archs"][0]["source"], "link")
        self.assertEqual(self.server.access_log().count("/cache/env/"), before)
        bad = self.link(a, None, env_extra={"CUDAQ_RT_REMOTE_CACHE": "cache.example:80"},
                        expect=1)
        self.assertEqual(bad.stderr.strip(), "cudaq-rt-link: error: CUDAQ_RT_REMOTE_CACHE: remote "
                         "cache 'cache.example:80' is not an http:// or https:// URL")

    def test_bad_url_is_an_error(self):
        r = subprocess.run([LINK, "--cache-stats", "--remote-cache", "ftp://host/x"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.strip(), "cudaq-rt-link: error: --remote-cache: remote cache "
                         "'ftp://host/x' is not an http:// or https:// URL")


if __name__ == "__main__":
    unittest.main(verbosity=2)
