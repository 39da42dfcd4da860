#!/usr/bin/python3
"""Hardening of cudaq-rt-pack and cudaq-rt-link against what a filesystem can hold: special files
where a regular file belongs, symbolic links inside a package or a cache, a directory that is not a
package, readers racing a writer, writers killed mid-run.

Environment (set by ctest): CUDAQ_RT_PACK, CUDAQ_RT_LINK (the tools), NVCC, CUDAQ_RT_INCLUDE
(libdispatch's include directory). Every link runs with CUDAQ_RT_CACHE_DIR set to a directory
of the test's own.
"""
import concurrent.futures
import fcntl
import json
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import time
import unittest

from harness import DEVICE_FLAGS, HANDLERS, LINK, NVCC, PACK, cache_env, read

# A tool that blocks is a failure, not a hang of the test.
QUICK = 30
LINKING = 300


def run(cmd, env=None, timeout=QUICK, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, **kw)


def check(cmd, env=None, timeout=LINKING):
    r = run(cmd, env, timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r


def snapshot(root):
    """{relative path: bytes, 'dir' or link target} of everything under root."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            out[rel] = ("link", os.readlink(p)) if os.path.islink(p) else \
                "dir" if os.path.isdir(p) else read(p)
    return out


def fatbin_container(index, payload_size):
    """One fatbin container holding one cubin entry for sm_80 whose payload starts with index."""
    payload = struct.pack("<Q", index) + bytes(payload_size - 8)
    entry = bytearray(64)
    struct.pack_into("<HHIQ", entry, 0, 2, 0, len(entry), len(payload))
    struct.pack_into("<I", entry, 0x1C, 80)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(entry) + len(payload)) + entry + payload


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


class Hardening(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cudaq-rt-hardening.")
        cls.obj = os.path.join(cls.tmp, "arith.o")
        check([NVCC, *DEVICE_FLAGS, "-c", os.path.join(HANDLERS, "arith.cu"), "-o", cls.obj])
        base = os.path.join(cls.tmp, "base")
        os.mkdir(base)
        check([PACK, "-o", base, "-n", "app", cls.obj])
        cls.base = os.path.join(base, "app.cudaqpkg")
        # Links that several tests then find in the cache: the two sm_80 cubins the relinking
        # writer alternates between, and the sm_90 one its concurrent readers link.
        cls.cache = os.path.join(cls.tmp, "cache")
        primes = [subprocess.Popen([LINK, cls.base, "--no-store", *args], env=cache_env(cls.cache),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for args in (["--arch", "sm_80", "-O", "0"], ["--arch", "sm_80", "-O", "3"],
                               ["--arch", "sm_90"])]
        errors = [p.communicate(timeout=LINKING)[1] for p in primes]
        for p, err in zip(primes, errors):
            if p.returncode != 0:
                raise RuntimeError(f"priming the cache failed ({p.returncode}):\n{err}")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def fresh(self):
        """A directory of the test's own holding a copy of the base package."""
        d = tempfile.mkdtemp(dir=self.tmp, prefix="t.")
        return d, shutil.copytree(self.base, os.path.join(d, "app.cudaqpkg"))

    def fails(self, cmd, line, env=None, **kw):
        """Runs cmd, which must fail with status 1 and exactly `line` as its only stderr line."""
        r = run(cmd, env, **kw)
        self.assertEqual((r.returncode, r.stderr, r.stdout), (1, line + "\n", ""), cmd)

    # --- special files where a regular file belongs (items 2 and 3) ---------------------------

    def test_manifest_that_is_not_a_regular_file(self):
        d, pkg = self.fresh()
        manifest = os.path.join(pkg, "manifest.json")
        os.remove(manifest)
        os.mkfifo(manifest)
        for tool, args in ((PACK, ["--list", pkg]), (LINK, [pkg, "--arch", "sm_80", "--dry-run"]),
                           (LINK, [pkg, "--arch", "sm_80"])):
            self.fails([tool, *args], f"{os.path.basename(tool)}: error: '{manifest}': "
                       "is a FIFO or pipe, not a regular file", env=cache_env(self.cache))
        os.remove(manifest)
        os.symlink("/dev/zero", manifest)
        for tool, args in ((PACK, ["--list", pkg]), (LINK, [pkg, "--arch", "sm_80", "--dry-run"])):
            self.fails([tool, *args], f"{os.path.basename(tool)}: error: '{manifest}': "
                       "is a symbolic link, not a regular file", env=cache_env(self.cache))
        # A regular file, but larger than any manifest: read no further than the limit.
        os.remove(manifest)
        with open(manifest, "wb") as f:
            f.truncate((64 << 20) + 1)
        self.fails([PACK, "--list", pkg], f"cudaq-rt-pack: error: '{manifest}': is "
                   f"{(64 << 20) + 1} bytes, more than the limit of {64 << 20}")

    def test_pack_input_that_is_not_a_regular_file(self):
        d = tempfile.mkdtemp(dir=self.tmp, prefix="t.")
        fifo = os.path.join(d, "fifo")
        os.mkfifo(fifo)
        out = os.path.join(d, "out")
        os.mkdir(out)
        for path, what in ((fifo, "a FIFO or pipe"), ("/dev/zero", "a character device")):
            line = f"cudaq-rt-pack: error: '{path}': is {what}, not a regular file"
            self.fails([PACK, "-o", out, "-n", "x", path], line)
            self.fails([PACK, "--list", path], line)
        # Standard input from a pipe: refused for what it is, not as a file that changed.
        r = run([PACK, "-o", out, "-n", "x", "/dev/stdin"], input="not read")
        self.assertEqual((r.returncode, r.stderr), (1, "cudaq-rt-pack: error: '/dev/stdin': is a "
                                                       "FIFO or pipe, not a regular file\n"))
        self.assertEqual(os.listdir(out), [])

    def test_cache_entries_that_are_not_regular_files(self):
        # A FIFO would block the link, a link to /dev/zero would be read without end; both are
        # corrupt entries: removed, relinked, stored. The stats file is a link to a file of the
        # user's that must not be truncated (item 4).
        d, pkg = self.fresh()
        cache = os.path.join(d, "cache")
        r = check([LINK, pkg, "--arch", "sm_80,sm_90", "--dry-run", "--json"], cache_env(cache))
        keys = {a["arch"]: a["cache_key"][len("sha256:"):] for a in json.loads(r.stdout)["archs"]}
        entry = {arch: os.path.join(cache, "v1", k[:2], k) for arch, k in keys.items()}
        for path in entry.values():
            os.makedirs(os.path.dirname(path), exist_ok=True)
        os.mkfifo(entry["sm_80"])
        os.symlink("/dev/zero", entry["sm_90"])
        victim = os.path.join(d, "precious.txt")
        with open(victim, "w") as f:
            f.write("a file of the user's\n")
        stats = os.path.join(cache, "v1", "stats")
        os.symlink(victim, stats)
        r = check([LINK, pkg, "--arch", "sm_80,sm_90", "--no-store", "--json"], cache_env(cache))
        self.assertEqual([a["cache_hit"] for a in json.loads(r.stdout)["archs"]], [False, False])
        for path in entry.values():
            self.assertTrue(os.path.isfile(path) and not os.path.islink(path), path)
        self.assertEqual(read(victim), b"a file of the user's\n")
        self.assertTrue(os.path.islink(stats))
        self.fails([LINK, "--cache-stats"], f"cudaq-rt-link: error: '{stats}': is a symbolic "
                   "link, not a regular file", env=cache_env(cache))
        self.assertEqual(read(victim), b"a file of the user's\n")

    # --- symbolic links and what --force replaces (items 4 and 5) -----------------------------

    def test_lock_file_that_is_a_symbolic_link(self):
        d, pkg = self.fresh()
        elsewhere = os.path.join(d, "elsewhere")
        os.mkdir(elsewhere)
        target = os.path.join(elsewhere, "created-through-the-lock")
        lock = os.path.join(d, ".app.cudaqpkg.lock")
        os.symlink(target, lock)
        before = snapshot(d)
        line = f"error: '{lock}': is a symbolic link, not a regular file"
        self.fails([PACK, "-f", "-o", d, "-n", "app", self.obj], "cudaq-rt-pack: " + line)
        self.fails([LINK, pkg, "--arch", "sm_90"], "cudaq-rt-link: " + line,
                   env=cache_env(self.cache), timeout=LINKING)
        self.assertFalse(os.path.lexists(target))
        self.assertEqual(snapshot(d), before)

    def test_force_replaces_only_a_package(self):
        d = tempfile.mkdtemp(dir=self.tmp, prefix="t.")
        notes = os.path.join(d, "notes.cudaqpkg")
        os.mkdir(notes)
        with open(os.path.join(notes, "thesis.txt"), "w") as f:
            f.write("four years of work\n")
        tail = ": --force replaces only a package; move it away or pack under another name"
        cmd = [PACK, "-f", "-o", d, "-n", "notes", self.obj]
        self.fails(cmd, f"cudaq-rt-pack: error: '{notes}': is not a package (no manifest.json)"
                   + tail)
        with open(os.path.join(notes, "manifest.json"), "w") as f:
            f.write("my own notes, not JSON\n")
        r = run(cmd)
        self.assertEqual(r.returncode, 1)
        self.assertTrue(r.stderr.startswith(f"cudaq-rt-pack: error: '{notes}': is not a package "
                                            f"('{notes}/manifest.json': "), r.stderr)
        self.assertTrue(r.stderr.endswith(tail + "\n"), r.stderr)
        self.assertEqual(read(os.path.join(notes, "thesis.txt")), b"four years of work\n")
        shutil.rmtree(notes)
        with open(notes, "w") as f:
            f.write("a file\n")
        self.fails(cmd, f"cudaq-rt-pack: error: '{notes}': is not a package (a regular file)"
                   + tail)
        self.assertEqual(read(notes), b"a file\n")
        self.assertEqual(sorted(os.listdir(d)), [".notes.cudaqpkg.lock", "notes.cudaqpkg"])
        # A package, even a broken one, is replaced.
        os.remove(notes)
        check([PACK, "-o", d, "-n", "notes", self.obj])
        shutil.rmtree(os.path.join(notes, "blobs"))
        check(cmd)
        self.assertTrue(os.path.isdir(os.path.join(notes, "blobs")))

    # --- readers racing a writer (item 6) -----------------------------------------------------

    def test_readers_see_one_whole_package_while_it_is_relinked(self):
        d, pkg = self.fresh()
        env = cache_env(self.cache)
        done = threading.Event()
        writer = {"links": 0, "errors": []}

        # Each relink is a cache hit that stores the other sm_80 cubin, so every store drops a
        # blob that readers of the previous manifest need.
        def relink():
            while not done.is_set():
                level = ("0", "3")[writer["links"] % 2]
                r = run([LINK, pkg, "--arch", "sm_80", "-O", level], env, LINKING)
                if r.returncode != 0:
                    writer["errors"].append(r.stderr)
                writer["links"] += 1

        readers = [[LINK, pkg, "--arch", "sm_80", "--dry-run"], [PACK, "--list", pkg],
                   [LINK, pkg, "--arch", "sm_90", "--no-store"]] * 100

        def read_once(cmd):
            r = run(cmd, env, LINKING)
            return None if r.returncode == 0 else f"{' '.join(cmd[:2])}: {r.stderr}"

        t = threading.Thread(target=relink)
        t.start()
        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=4) as ex:
                failures = [f for f in ex.map(read_once, readers) if f]
        finally:
            done.set()
            t.join()
        self.assertEqual(failures, [])
        self.assertEqual(writer["errors"], [])
        self.assertGreaterEqual(writer["links"], 5, "the readers never raced a writer")
        self.assertEqual(sorted(os.listdir(d)), [".app.cudaqpkg.lock", "app.cudaqpkg"])

    # --- writers stopped mid-run (item 7) -----------------------------------------------------

    def big_input(self, d):
        """A fatbin of 400 containers, 100 MB: packing it takes seconds, most of them writing."""
        path = os.path.join(d, "big.fatbin")
        with open(path, "wb") as f:
            for i in range(400):
                f.write(fatbin_container(i, 256 << 10))
        return path

    def pack_until_it_writes(self, out, big):
        """Starts packing `big` into out/big.cudaqpkg; returns once its temporary directory is
        there."""
        p = subprocess.Popen([PACK, "-o", out, "-n", "big", big], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + LINKING
        while not any(n.startswith(".big.cudaqpkg.tmp-") for n in os.listdir(out)):
            self.assertIsNone(p.poll(), "pack finished before it could be stopped")
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.002)
        time.sleep(0.01)  # into the writing of its blobs
        return p

    def test_a_stopped_pack_removes_its_temporary_directory(self):
        d = tempfile.mkdtemp(dir=self.tmp, prefix="t.")
        big = self.big_input(d)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            out = os.path.join(d, "out-%d" % sig)
            os.mkdir(out)
            p = self.pack_until_it_writes(out, big)
            p.send_signal(sig)
            p.communicate(timeout=QUICK)
            self.assertEqual(p.returncode, -sig)
            self.assertEqual(os.listdir(out), [])

    def test_the_next_writer_removes_what_a_killed_one_left(self):
        d = tempfile.mkdtemp(dir=self.tmp, prefix="t.")
        big = self.big_input(d)
        out = os.path.join(d, "out")
        os.mkdir(out)
        p = self.pack_until_it_writes(out, big)
        p.kill()
        p.communicate(timeout=QUICK)
        left = [n for n in os.listdir(out) if n.startswith(".big.cudaqpkg.tmp-")]
        self.assertEqual(len(left), 1)
        # What must stay: a live process's directory, and directories someone holds a lock on
        # (a writer in another pid namespace, a reader of a replaced package).
        keep = [".big.cudaqpkg.tmp-%d-live" % os.getpid(), ".big.cudaqpkg.tmp-%d-held" % dead_pid(),
                ".big.cudaqpkg.old-held"]
        held = []
        for name in keep:
            os.mkdir(os.path.join(out, name))
            if name.endswith("held"):
                fd = os.open(os.path.join(out, name), os.O_RDONLY)
                fcntl.flock(fd, fcntl.LOCK_SH)
                held.append(fd)
        os.mkdir(os.path.join(out, ".big.cudaqpkg.old-unheld"))
        try:
            check([PACK, "-o", out, "-n", "big", self.obj])
            self.assertEqual(sorted(os.listdir(out)), sorted(keep + ["big.cudaqpkg"]))
        finally:
            for fd in held:
                os.close(fd)
        # cudaq-rt-link storing into a package cleans up the same way.
        os.mkdir(os.path.join(out, ".big.cudaqpkg.tmp-%d-x" % dead_pid()))
        check([LINK, os.path.join(out, "big.cudaqpkg"), "--arch", "sm_90"], cache_env(self.cache))
        self.assertEqual(sorted(os.listdir(out)), sorted(
            [".big.cudaqpkg.lock", ".big.cudaqpkg.tmp-%d-live" % os.getpid(), "big.cudaqpkg"]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
