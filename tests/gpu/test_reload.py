#!/usr/bin/python3
"""GPU tests of hot reload: `cudaq-rt-run PKG --serve` over UDP swapping two versions of one
application (tests/gpu/reload_handlers.cu, built as version 1 and 2) under 8 clients that send
without a pause, on SIGHUP and on --watch; and new table generations while serving. Exits 77
(ctest: SKIPPED) at once where there is no GPU.

Every answer is checked: `versioned` answers its payload behind the version byte, so each request
must be answered exactly once, by version 1 or 2, with its own payload; `checked` sums the table
global and says when it saw a torn one. The gaps (the server's, from the report, and the clients':
from the last answer of one version to the first of the next) are printed, never asserted.

Environment (set by ctest or scripts/gpu-tests.sh): CUDAQ_RT_PACK, CUDAQ_RT_LINK, CUDAQ_RT_RUN,
CUDAQ_RT_BRIDGE_PATH, CUDAQ_RT_RELOAD_V1 and CUDAQ_RT_RELOAD_V2 (the two versions' archives).
"""
import json
import multiprocessing
import os
import re
import signal
import statistics
import struct
import subprocess
import sys
import threading
import time
import unittest

from gpu_harness import ClassDirCase, RUN, assert_document, gpus, link_for, main, pack_into

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../../python"))

import cudaq_rt_client as client  # noqa: E402

V1 = os.environ.get("CUDAQ_RT_RELOAD_V1", "")
V2 = os.environ.get("CUDAQ_RT_RELOAD_V2", "")
WORDS = 4096
TABLE = "cudaq_rt_test_reload_table"
ARCH, GPU_COUNT = gpus() if __name__ == "__main__" else (None, 0)


def table_bytes(generation):
    """Generation `generation` of the table: word 0 the generation, the last word the sum."""
    x = (generation * 2654435761 + 1) & 0xFFFFFFFF
    words = [generation]
    for _ in range(WORDS - 2):
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        words.append(x)
    words.append(sum(words) & 0xFFFFFFFF)
    return struct.pack(f"<{WORDS}I", *words)


def write_atomically(path, data):
    tmp = path + ".new"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def flip(link, target):
    """Points the symlink `link` at `target` in one rename."""
    tmp = link + ".new"
    if os.path.lexists(tmp):
        os.remove(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)


def versioned_worker(args):
    """One client: `versioned` requests, `window` in flight, for `seconds`, then the last answers.
    Returns its counts and, at each change of the answering version, the time from the last
    answer of the old one to the first of the new (seconds)."""
    address, seconds, window, tag, handler = args
    fid = client.function_id(handler)
    out = {"sent": 0, "answered": 0, "wrong": 0, "lost": 0, "versions": {}, "gaps": [],
           "generations": [], "torn": 0}
    with client.Client(address, 5, first_request_id=0) as c:
        pending = {}
        end = time.monotonic() + seconds
        last_version, last_time = None, None
        while time.monotonic() < end or pending:
            try:
                while time.monotonic() < end and len(pending) < window:
                    rid = c.next_request_id()
                    body = tag + struct.pack("<Q", rid)
                    c.send(client.request(fid, body, rid, rid))
                    pending[rid] = body
                    out["sent"] += 1
                answer = c.receive(5)
            except client.NoAnswerError:
                break
            now = time.monotonic()
            body = pending.pop(answer.request_id, None)
            if body is None:
                out["wrong"] += 1
                continue
            if handler == "versioned":
                version = answer.result[0] if answer.result else None
                ok = (answer.status == 0 and version in (1, 2) and answer.result[1:] == body and
                      answer.ptp_timestamp == answer.request_id)
            else:
                generation, version = struct.unpack("<II", answer.result) \
                    if len(answer.result) == 8 else (None, None)
                if answer.status == 1:
                    out["torn"] += 1
                ok = answer.status == 0 and version in (1, 2) and generation is not None
                if ok and (not out["generations"] or out["generations"][-1] != generation):
                    out["generations"].append(generation)
            if not ok:
                out["wrong"] += 1
                continue
            out["answered"] += 1
            out["versions"][version] = out["versions"].get(version, 0) + 1
            if last_version is not None and version != last_version:
                out["gaps"].append(now - last_time)
            last_version, last_time = version, now
        out["lost"] = len(pending)
    return out


class Serving:
    """A `cudaq-rt-run --serve --json` process whose stderr is read as it comes."""

    def __init__(self, test, pkg, *args, env=None, gpus=1):
        self.test = test
        self.proc = subprocess.Popen([RUN, pkg, "--serve", "--json", *args], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stderr))
        self.reader.start()
        self.address = self.wait_for(r"cudaq-rt-run: serving on (\S+) \(GPU").group(1)
        self.addresses = [self.wait_for(r"cudaq-rt-run: serving on (\S+) \(GPU", count=i + 1)
                          .group(1) for i in range(gpus)]

    def wait_for(self, pattern, count=1, timeout=120):
        """The `count`th stderr line that matches `pattern` (its match); fails after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            found = [m for m in (re.search(pattern, l) for l in list(self.lines)) if m]
            if len(found) >= count:
                return found[count - 1]
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                self.test.fail(f"no line {pattern!r} (#{count}); exit {self.proc.returncode}:\n" +
                               "".join(self.lines))
            time.sleep(0.005)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        out = self.proc.stdout.read()
        self.proc.wait(60)
        self.reader.join()
        self.proc.stdout.close()
        self.proc.stderr.close()
        self.test.assertEqual(self.proc.returncode, 0, out + "".join(self.lines))
        doc = json.loads(out)
        assert_document(self.test, doc)
        return doc


class ReloadCase(ClassDirCase):
    dir_prefix = "cudaq-rt-reload-gpu"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.env = dict(os.environ, CUDAQ_RT_CACHE_DIR=os.path.join(cls.tmp, "cache"))
        cls.v1 = pack_into(cls.tmp, "v1", V1)
        cls.v2 = pack_into(cls.tmp, "v2", V2)
        for pkg in (cls.v1, cls.v2):
            link_for(pkg, ARCH, "--bridge", "udp", env=cls.env)
        cls.table = os.path.join(cls.tmp, "table.bin")

    def current(self, name, target):
        link = os.path.join(self.tmp, name + ".cudaqpkg")
        flip(link, target)
        return link

    def swaps_under_load(self, handler, reloads, step, *serve_args, gpus=1):
        """8 clients on `handler` (spread over the GPUs' ports) while `step(i)` changes something
        and SIGHUP asks for a reload, `reloads` times; returns the clients' results and the
        report."""
        write_atomically(self.table, table_bytes(1))
        link = self.current("current", self.v1)
        s = Serving(self, link, "--global", f"{TABLE}=@{self.table}", *serve_args, env=self.env,
                    gpus=gpus)
        n, seconds = 8, 3.0 + 0.35 * reloads
        pool = multiprocessing.Pool(n)
        work = pool.map_async(versioned_worker, [(s.addresses[i % gpus], seconds, 8,
                                                  bytes([0x40 + i]) * 8, handler)
                                                 for i in range(n)])
        time.sleep(1.0)
        for i in range(reloads):
            step(i, link)
            s.proc.send_signal(signal.SIGHUP)
            s.wait_for(r"cudaq-rt-run: reload \(signal\): (swapped|globals)", count=i + 1)
            time.sleep(0.3)
        results = work.get(seconds + 60)
        pool.close()
        pool.join()
        return results, s.stop(), s

    def report_gaps(self, what, doc, results):
        gaps = [sw["gap_ms"] for r in doc["reloads"] for sw in r["swaps"]]
        stage = [r["stage_ms"] for r in doc["reloads"]]
        took = [r["duration_ms"] for r in doc["reloads"]]
        seen = sorted(g * 1e3 for r in results for g in r["gaps"])
        line = (f"\n  {what}: {len(doc['reloads'])} reloads: server gap ms p50 "
                f"{statistics.median(gaps):.3f} max {max(gaps):.3f}; SIGHUP to swapped ms p50 "
                f"{statistics.median(took):.1f} max {max(took):.1f} (staging p50 "
                f"{statistics.median(stage):.1f})")
        if seen:
            line += (f"; clients, last answer of one version to the first of the next, ms: p50 "
                     f"{statistics.median(seen):.3f} max {seen[-1]:.3f}")
        print(line, file=sys.stderr)


class ReloadTest(ReloadCase):
    def test_ten_reloads_under_eight_clients_lose_nothing(self):
        versions = [self.v1, self.v2]
        results, doc, _ = self.swaps_under_load(
            "versioned", 10, lambda i, link: flip(link, versions[(i + 1) % 2]))
        for i, r in enumerate(results):
            self.assertEqual((r["wrong"], r["lost"]), (0, 0), f"client {i}")
            self.assertEqual(r["answered"], r["sent"], f"client {i}")
            self.assertEqual(set(r["versions"]), {1, 2}, f"client {i}")
        self.assertEqual([r["outcome"] for r in doc["reloads"]], ["swapped"] * 10)
        self.assertEqual([r["trigger"] for r in doc["reloads"]], ["signal"] * 10)
        t = doc["total"]
        answered = sum(r["answered"] for r in results)
        self.assertEqual(t["served"], answered)
        self.assertEqual(t["bridge"]["datagrams_received"], answered)
        self.assertEqual(t["dispatch"]["requests"], answered)  # the counters carried over
        self.assertEqual((t["protocol_errors"], t["dropped"]), (0, 0))
        self.report_gaps("versioned, 8 clients", doc, results)

    @unittest.skipIf(GPU_COUNT < 2, "one GPU")
    def test_two_gpus_swap_in_turn(self):
        versions = [self.v1, self.v2]
        results, doc, _ = self.swaps_under_load(
            "versioned", 10, lambda i, link: flip(link, versions[(i + 1) % 2]), "--device",
            "0,1", gpus=2)
        for i, r in enumerate(results):
            self.assertEqual((r["wrong"], r["lost"]), (0, 0), f"client {i}")
            self.assertEqual(set(r["versions"]), {1, 2}, f"client {i}")
        self.assertEqual([len(r["swaps"]) for r in doc["reloads"]], [2] * 10)
        self.report_gaps("two GPUs in turn, 8 clients", doc, results)

    def test_table_generations_under_load_are_never_torn(self):
        def next_table(i, link):
            write_atomically(self.table, table_bytes(i + 2))

        results, doc, _ = self.swaps_under_load("checked", 10, next_table)
        for i, r in enumerate(results):
            self.assertEqual((r["wrong"], r["lost"], r["torn"]), (0, 0, 0), f"client {i}")
            # Each client sees the generations in order, never an older one after a newer one.
            self.assertEqual(r["generations"], sorted(r["generations"]), f"client {i}")
        self.assertEqual([r["outcome"] for r in doc["reloads"]], ["globals"] * 10)
        self.report_gaps("table generations, 8 clients", doc, results)

    def test_watch_swaps_a_changed_package_and_sighup_alone_swaps_nothing(self):
        write_atomically(self.table, table_bytes(1))
        link = self.current("watched", self.v1)
        s = Serving(self, link, "--global", f"{TABLE}=@{self.table}", "--watch", "0.05",
                    env=self.env)
        with client.Client(s.address, 5) as c:
            self.assertEqual(c.call("versioned", b"x").result, b"\x01x")
            s.proc.send_signal(signal.SIGHUP)
            s.wait_for(r"reload \(signal\): unchanged")
            self.assertEqual(c.call("versioned", b"x").result, b"\x01x")
            flip(link, self.v2)
            s.wait_for(r"reload \(watch\): swapped")
            self.assertEqual(c.call("versioned", b"y").result, b"\x02y")
        doc = s.stop()
        self.assertEqual([(r["trigger"], r["outcome"]) for r in doc["reloads"]],
                         [("signal", "unchanged"), ("watch", "swapped")])

    def test_a_refused_package_leaves_the_old_one_serving(self):
        write_atomically(self.table, table_bytes(1))
        link = self.current("refused", self.v1)
        s = Serving(self, link, "--global", f"{TABLE}=@{self.table}", env=self.env)
        # A package of the example application: none of the handlers the table serves.
        other = pack_into(self.tmp, "other", os.environ["CUDAQ_RT_EXAMPLE_APP"])
        with client.Client(s.address, 5) as c:
            flip(link, other)
            s.proc.send_signal(signal.SIGHUP)
            m = s.wait_for(r"cudaq-rt-run: reload \(signal\): refused: (.*)")
            self.assertIn("does not export handler", m.group(1))
            self.assertTrue(m.group(0).endswith("; the old code serves on"), m.group(0))
            self.assertEqual(c.call("versioned", b"z").result, b"\x01z")
        doc = s.stop()
        self.assertEqual([r["outcome"] for r in doc["reloads"]], ["refused"])


if __name__ == "__main__":
    main(ARCH is not None and V1 and V2)
