#!/usr/bin/python3
"""GPU tests of serving over UDP: `cudaq-rt-run PKG --serve` with the udp bridge, driven by the
reference client (python/cudaq_rt_client; its command, tools/cudaq-rt-client.py). Exits 77
(ctest: SKIPPED) at once where there is no GPU; the two-GPU test skips where there is one GPU.

Environment (set by ctest): CUDAQ_RT_PACK, CUDAQ_RT_LINK, CUDAQ_RT_RUN (the tools),
CUDAQ_RT_EXAMPLE_APP, CUDAQ_RT_FAULT_APP (the applications), CUDAQ_RT_BRIDGE_PATH (the bridges' directory),
CUDAQ_RT_CLIENT (the reference client's command).
"""
import json
import multiprocessing
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

from gpu_harness import (EXAMPLE_APP, FAULT_APP, RUN, ClassDirCase, assert_document, gpus,
                         link_for, main, pack_into)

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.environ.get("CUDAQ_RT_CLIENT", os.path.join(HERE, "../../tools/cudaq-rt-client.py"))
sys.path.insert(0, os.path.join(HERE, "../../python"))

import cudaq_rt_client as client  # noqa: E402

SLOT = 1024  # the udp bridge's default slot_size


ARCH, GPU_COUNT = gpus() if __name__ == "__main__" else (None, 0)


def load_worker(args):
    """One client process: `count` echo requests to `address`, `window` in flight, tagged."""
    address, count, window, tag, timeout = args
    with client.Client(address, timeout, first_request_id=0) as c:
        r = client.bench(c, count, window, tag=tag)
    latency = r.latency_us()
    return {"sent": r.sent, "answered": r.answered, "wrong": r.wrong, "lost": r.lost,
            "p50_us": latency["p50"], "p99_us": latency["p99"]}


def mixed_worker(args):
    """One client process: `count` echoes of payloads of 8 to `largest` bytes (half of them at
    most 64), random bytes each, `window` in flight, every answer checked byte for byte."""
    address, count, window, seed, largest, timeout = args
    rng = random.Random(seed)
    sent = answered = wrong = 0
    payload_bytes = 0
    pending = {}  # request_id: payload
    with client.Client(address, timeout, first_request_id=0) as c:
        while answered + wrong < count:
            while sent < count and len(pending) < window:
                n = rng.randint(8, 64 if rng.getrandbits(1) else largest)
                body = rng.randbytes(n)
                rid = c.next_request_id()
                c.send(client.request("echo", body, rid, sent))
                pending[rid] = body
                sent += 1
                payload_bytes += n
            try:
                r = c.receive()
            except client.NoAnswerError:
                break
            body = pending.pop(r.request_id, None)
            if body is None or r.status != 0 or r.result != body:
                wrong += 1
            else:
                answered += 1
    return {"sent": sent, "answered": answered, "wrong": wrong, "lost": len(pending),
            "payload_bytes": payload_bytes}


class Server:
    """A `cudaq-rt-run --serve --json` process; its addresses as it printed them at start."""

    def __init__(self, test, pkg, *args, gpus=1, env=None):
        self.test = test
        self.proc = subprocess.Popen([RUN, pkg, "--serve", "--json", *args], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stderr = []
        self.reader = threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr))
        self.reader.start()
        # A start that never finishes is a failure, not a hang of the test.
        deadline = time.monotonic() + 120
        while len(self.addresses) < gpus:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                out = self.proc.stdout.read()
                self.reader.join()
                test.fail(f"{len(self.addresses)} of {gpus} 'serving on' lines; exit "
                          f"{self.proc.returncode}:\n" + "".join(self.stderr) + out)
            time.sleep(0.01)

    @property
    def addresses(self):
        return [m.group(1) for m in (re.match(r"cudaq-rt-run: serving on (\S+) \(GPU \d+: ", l)
                                     for l in list(self.stderr)) if m]

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Sends `sig` (None: wait for the server to stop by itself); returns the JSON report."""
        if sig is not None:
            self.proc.send_signal(sig)
        out = self.proc.stdout.read()
        self.proc.wait(timeout)
        self.reader.join()
        self.proc.stdout.close()
        self.proc.stderr.close()
        self.test.assertEqual(self.proc.returncode, 0, out + "".join(self.stderr))
        doc = json.loads(out)
        assert_document(self.test, doc)
        self.test.assertEqual(doc["exit_status"], 0)
        return doc


class UdpCase(ClassDirCase):
    dir_prefix = "cudaq-rt-udp-gpu"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.env = dict(os.environ, CUDAQ_RT_CACHE_DIR=os.path.join(cls.tmp, "cache"))
        cls.pkg = cls.package(EXAMPLE_APP, "example")

    @classmethod
    def package(cls, app, name):
        """Packs `app` as NAME.cudaqpkg in the class's directory and links it for this GPU with the
        UDP bridge's hooks; its path."""
        pkg = pack_into(cls.tmp, name, app)
        link_for(pkg, ARCH, "--bridge", "udp", env=cls.env)
        return pkg

    def serve(self, *args, gpus=1):
        return Server(self, self.pkg, *args, gpus=gpus, env=self.env)

    def run_tool(self, *args, timeout=120):
        return subprocess.run([RUN, self.pkg, *args], capture_output=True, text=True,
                              env=self.env, timeout=timeout)

    def assert_every_answer(self, results, count, what=""):
        """Each client of `results` sent `count` requests and got every answer right."""
        for i, r in enumerate(results):
            self.assertEqual((r["sent"], r["answered"], r["wrong"], r["lost"]),
                             (count, count, 0, 0), f"{what}client {i}")

    def assert_one_error(self, r, *keywords):
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        errors = [l for l in r.stderr.splitlines() if l.startswith("cudaq-rt-run: error: ")]
        self.assertEqual(len(errors), 1, r.stderr)
        for k in keywords:
            self.assertIn(k, errors[0])


class ServeTest(UdpCase):
    def test_eight_clients_100000_each(self):
        s = self.serve()
        n, count = 8, 100000
        t0 = time.monotonic()
        with multiprocessing.Pool(n) as pool:
            # Every client uses request_ids 0..count-1: answers are matched by sender, not id.
            results = pool.map(load_worker, [(s.addresses[0], count, 16, bytes([i + 1]) * 8, 10)
                                             for i in range(n)])
        seconds = time.monotonic() - t0
        doc = s.stop()
        self.assert_every_answer(results, count)
        t = doc["total"]
        self.assertEqual(t["served"], n * count)
        self.assertEqual(t["bridge"]["datagrams_received"], n * count)
        self.assertEqual(t["bridge"]["responses_sent"], n * count)
        self.assertEqual((t["protocol_errors"], t["dropped"]), (0, 0))
        self.assertEqual(t["dispatch"]["requests"], n * count)
        self.assertEqual(t["dispatch"]["ok"], n * count)
        self.assertEqual(t["latency_us"]["count"], n * count)
        self.assertEqual(doc["stopped_by"], "signal")
        print(f"\n  8 clients x {count}: {n * count / seconds:.0f} requests/s through Python "
              f"clients; server latency us p50 {t['latency_us']['p50']:.2f} p99 "
              f"{t['latency_us']['p99']:.2f}; client round trip p50 "
              f"{sorted(r['p50_us'] for r in results)[n // 2]:.1f} us", file=sys.stderr)

    def test_two_warps_four_clients_50000_each(self):
        # The warp dispatcher as two blocks: the ring's warps=2, each warp its own groups of 32
        # slots; every answer right, and the two warps' counters summed.
        link_for(self.pkg, ARCH, "--bridge", "udp", "--dispatcher", "warp", env=self.env)
        s = self.serve("--dispatcher", "warp", "--grid", "2,32", "--bridge-arg", "slots=256")
        n, count = 4, 50000
        with multiprocessing.Pool(n) as pool:
            results = pool.map(load_worker, [(s.addresses[0], count, 32, bytes([i + 1]) * 8, 10)
                                             for i in range(n)])
        doc = s.stop()
        self.assert_every_answer(results, count)
        t = doc["total"]
        self.assertEqual((t["served"], t["dispatch"]["requests"], t["dispatch"]["ok"]),
                         (n * count, n * count, n * count))

    def mixed_sizes(self, s, what):
        """1,000,000 echoes of mixed sizes (8 bytes to the slot's payload) from 8 clients through
        server `s`, none lost or wrong, and the server's counters agree."""
        n, count = 8, 125000
        largest = SLOT - client.HEADER_SIZE
        t0 = time.monotonic()
        with multiprocessing.Pool(n) as pool:
            results = pool.map(mixed_worker, [(s.addresses[0], count, 16, 1000 + i, largest, 10)
                                              for i in range(n)])
        seconds = time.monotonic() - t0
        doc = s.stop()
        self.assert_every_answer(results, count, f"{what}: ")
        t = doc["total"]
        self.assertEqual((t["served"], t["dispatch"]["requests"], t["dispatch"]["ok"]),
                         (n * count, n * count, n * count), what)
        self.assertEqual((t["bridge"]["datagrams_received"], t["bridge"]["responses_sent"]),
                         (n * count, n * count), what)
        self.assertEqual((t["protocol_errors"], t["dropped"]), (0, 0), what)
        print(f"\n  {what}: {n * count} echoes of 8..{largest} B from {n} clients, none lost, "
              f"0 wrong: {n * count / seconds:.0f} requests/s, "
              f"{sum(r['payload_bytes'] for r in results) / seconds / 1e6:.1f} MB/s of payload "
              f"each way", file=sys.stderr)

    def test_mixed_sizes_one_million(self):
        self.mixed_sizes(self.serve(), "unified kernel")

    def test_mixed_sizes_one_million_warp(self):
        # The warp dispatcher in the slots layout (two warps and the lanes layout: the test of
        # four clients above).
        link_for(self.pkg, ARCH, "--bridge", "udp", "--dispatcher", "warp", env=self.env)
        s = self.serve("--dispatcher", "warp", "--bridge-arg", "slots=256,layout=slots")
        self.mixed_sizes(s, "warp dispatcher, slots layout")

    def test_every_malformed_kind_while_valid_traffic_flows(self):
        s = self.serve()
        address = s.addresses[0]
        pool = multiprocessing.Pool(3)
        load = pool.map_async(load_worker, [(address, 30000, 8, bytes([0xA0 + i]) * 8, 10)
                                            for i in range(3)])
        echo = client.function_id("echo")
        good = client.request("echo", b"abc", 99)
        cases = [
            ("23 bytes", good[:23], -4),
            ("header only, arg_len 8", client.request(echo, b"", 11, arg_len=8), -4),
            ("arg_len larger than the datagram", client.request(echo, b"wxyz", 12, arg_len=40), -4),
            ("arg_len smaller than the datagram", client.request(echo, b"wxyz" * 4, 13, arg_len=3),
             -6),
            ("oversize", client.request(echo, bytes(2000), 14), -2),
            ("bad magic", client.request(echo, b"wxyz", 15, magic=0x12345678), -1),
            ("the truncation marker", client.request(echo, b"wxyz", 16,
                                                      magic=client.TRUNCATED_MAGIC), -4),
            ("unknown function", client.request(0x0BADF00D, b"wxyz", 17), -1),
        ]
        valid = 0
        with client.Client(address, 5) as c:
            for what, runt in (("empty", b""), ("1 byte", b"\x52")):
                c.send(runt)
                c.send(good)  # a dropped datagram has no answer: the next one is this one's
                r = c.receive()
                self.assertEqual((r.status, r.request_id, r.result), (0, 99, b"abc"), what)
                valid += 1
            for what, datagram, status in cases:
                c.send(datagram)
                r = c.receive()
                self.assertEqual((r.status, r.request_id, r.result),
                                 (status, struct.unpack_from("<I", datagram, 12)[0], b""), what)
                self.assertEqual(c.call("echo", b"still serving").result, b"still serving", what)
                valid += 1
        results = load.get(120)
        pool.close()
        pool.join()
        for r in results:
            self.assertEqual((r["answered"], r["wrong"], r["lost"]), (30000, 0, 0))
        doc = s.stop()
        b = doc["total"]["bridge"]
        self.assertEqual((b["dropped_runt"], b["truncated"], b["bad_length"], b["oversize"],
                          b["bad_magic"], b["unknown_function"]), (2, 4, 1, 1, 1, 1))
        self.assertEqual(doc["total"]["served"], 90000 + valid)
        self.assertEqual(doc["total"]["protocol_errors"], 8)
        self.assertEqual(doc["total"]["dropped"], 2)
        self.assertEqual(b["datagrams_received"], 90000 + valid + 2 + len(cases))

    def test_sigterm_under_load_answers_everything_received(self):
        s = self.serve()
        pool = multiprocessing.Pool(4)
        load = pool.map_async(load_worker, [(s.addresses[0], 10 ** 8, 16, bytes([0xC0 + i]) * 8,
                                             3) for i in range(4)])
        time.sleep(2)
        t0 = time.monotonic()
        doc = s.stop(signal.SIGTERM, timeout=30)
        stop_s = time.monotonic() - t0
        results = load.get(60)
        pool.close()
        pool.join()
        b = doc["total"]["bridge"]
        sent = sum(r["sent"] for r in results)
        answered = sum(r["answered"] for r in results)
        self.assertEqual(sum(r["wrong"] for r in results), 0)
        self.assertGreater(answered, 1000)
        # Every datagram the server took was answered, and every answer reached its client...
        self.assertEqual(b["datagrams_received"], b["responses_sent"])
        self.assertEqual(b["responses_sent"], answered)
        # ...so what the clients miss is exactly what never reached the server before the stop.
        self.assertEqual(sent - answered, sum(r["lost"] for r in results))
        self.assertLessEqual(sent - answered, 4 * 16)
        self.assertEqual(doc["stopped_by"], "signal")
        self.assertLess(stop_s, 10)

    def test_wait_block(self):
        s = self.serve("--bridge-arg", "wait=block,slots=16")
        with multiprocessing.Pool(4) as pool:
            results = pool.map(load_worker, [(s.addresses[0], 20000, 16, bytes([0xB0 + i]) * 8, 10)
                                             for i in range(4)])
        for r in results:
            self.assertEqual((r["answered"], r["wrong"], r["lost"]), (20000, 0, 0))
        time.sleep(0.3)  # idle: both threads asleep; a request must still wake them
        with client.Client(s.addresses[0], 5) as c:
            self.assertEqual(c.call("echo", b"awake").result, b"awake")
        doc = s.stop()
        self.assertEqual(doc["total"]["served"], 80001)

    def test_threads_pinned_by_cpu(self):
        cpus = sorted(os.sched_getaffinity(0))
        first = next((c for c in cpus if c + 1 in cpus), None)
        if first is None:
            self.skipTest("no two CPUs side by side to run the two threads on")
        for threads, names in ((1, {"cudaq-rt-udp": first}),
                               (2, {"cudaq-rt-udp-rx": first, "cudaq-rt-udp-tx": first + 1})):
            s = self.serve("--bridge-arg", f"cpu={first},threads={threads}")
            pinned = {}
            for task in os.listdir(f"/proc/{s.proc.pid}/task"):
                with open(f"/proc/{s.proc.pid}/task/{task}/comm") as f:
                    name = f.read().strip()
                with open(f"/proc/{s.proc.pid}/task/{task}/status") as f:
                    allowed = re.search(r"^Cpus_allowed_list:\s*(\S+)$", f.read(), re.M).group(1)
                if name.startswith("cudaq-rt-udp"):
                    pinned[name] = allowed
            self.assertEqual(pinned, {n: str(c) for n, c in names.items()})
            with multiprocessing.Pool(2) as pool:
                results = pool.map(load_worker, [(s.addresses[0], 20000, 8, bytes([0xC0 + i]) * 8,
                                                  10) for i in range(2)])
            self.assert_every_answer(results, 20000, f"threads={threads}: ")
            self.assertEqual(s.stop()["total"]["served"], 40000)

    def test_bounds_stats_interval_and_text_report(self):
        s = self.serve("--count", "2000", "--stats-interval", "0.2")
        with client.Client(s.addresses[0], 5) as c:
            r = client.bench(c, 2000, 4)
        self.assertEqual(r.answered, 2000)
        doc = s.stop(sig=None)
        self.assertEqual(doc["stopped_by"], "count")
        self.assertEqual(doc["total"]["served"], 2000)
        r = self.run_tool("--serve", "--duration", "1", timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"^served for 1\.\d{3} s, stopped by duration\n"
                                   r"GPU 0 \(127\.0\.0\.1:\d+\): received 0, served 0 ")

    def test_live_stats_lines(self):
        s = self.serve("--stats-interval", "0.2")
        with client.Client(s.addresses[0], 5) as c:
            client.bench(c, 500, 4)
        time.sleep(0.7)
        s.stop()
        ticks = [l for l in s.stderr
                 if re.match(r"\d+\.\d s: GPU 0 \(127\.0\.0\.1:\d+\): received \d+, served \d+", l)]
        self.assertGreaterEqual(len(ticks), 2, "".join(s.stderr))
        self.assertTrue(any("received 500, served 500" in l for l in s.stderr), "".join(s.stderr))

    def test_reference_client_command(self):
        s = self.serve()
        a = s.addresses[0]
        r = subprocess.run([sys.executable, CLIENT, a, "--call", "echo", "--arg", "str:hello"],
                           capture_output=True, text=True)
        self.assertEqual((r.returncode, r.stdout), (0, "ok: 68656c6c6f\n"), r.stderr)
        r = subprocess.run([sys.executable, CLIENT, a, "--call", "sum_i32", "--arg", "i32:1,2",
                            "--i32", "3,-10", "--result", "i64"], capture_output=True, text=True)
        self.assertEqual((r.returncode, r.stdout), (0, "ok: -4\n"), r.stderr)
        r = subprocess.run([sys.executable, CLIENT, a, "--call", "nope"], capture_output=True,
                           text=True)
        self.assertEqual((r.returncode, r.stdout), (4, "unknown function or bad magic\n"),
                         r.stderr)
        r = subprocess.run([sys.executable, CLIENT, a, "--bench", "1000", "--inflight", "8"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("echo: 1000 requests of 16 bytes, 8 in flight: 1000 answered, 0 wrong, "
                      "0 lost", r.stdout)
        s.stop()


class RefusalTest(UdpCase):
    def test_port_in_use(self):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
            taken.bind(("127.0.0.1", 0))
            port = taken.getsockname()[1]
            r = self.run_tool("--serve", "--bridge-arg", f"port={port}")
        self.assert_one_error(r, f"bridge 'udp': cannot bind 127.0.0.1:{port}: "
                                 "Address already in use")

    def test_unknown_bridge_arg(self):
        r = self.run_tool("--serve", "--bridge-arg", "bogus=1")
        self.assert_one_error(r, "bridge 'udp': unknown option 'bogus' (known: bind=ADDR, port=N, "
                                 "slots=N, slot_size=BYTES, wait=spin|block, threads=1|2, cpu=N, layout=slots|lanes, bulk=BYTES, response_bulk=BYTES, spare_frame=0|1, warps=N)")

    def test_cpu_out_of_reach(self):
        r = self.run_tool("--serve", "--bridge-arg", "cpu=1023")
        self.assert_one_error(r, "bridge 'udp': cpu=1023: this process may not run on CPU 1023; "
                                 "it may on ")

    def test_device_out_of_range(self):
        r = self.run_tool("--serve", "--device", "9")
        self.assert_one_error(r, f"no GPU 9: this machine has {GPU_COUNT} GPU")
        r = self.run_tool("--serve", "--device", f"0,{GPU_COUNT}")
        self.assert_one_error(r, f"no GPU {GPU_COUNT}: this machine has {GPU_COUNT} GPU")
        r = self.run_tool("--call", "echo", "--device", "9")
        self.assert_one_error(r, f"no GPU 9: this machine has {GPU_COUNT} GPU")

    def test_host_fed_bridge_cannot_serve(self):
        r = self.run_tool("--serve", "--bridge", "loopback")
        self.assert_one_error(r, "bridge 'loopback' is fed by this process, not by clients")


class FaultWhileServingTest(UdpCase):
    """A handler that kills or hangs the kernel while serving: an error, exit 1, bounded time."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.faults = cls.package(FAULT_APP, "faults")

    def start(self, *args):
        s = Server(self, self.faults, "--stop-timeout", "1", *args, env=self.env)
        with client.Client(s.addresses[0], 5) as c:
            self.assertEqual(c.call("ok").status, 0)
        return s

    def finish(self, s, sig=None):
        if sig is not None:
            s.proc.send_signal(sig)
        out = s.proc.stdout.read()
        s.proc.wait(30)
        s.reader.join()
        s.proc.stdout.close()
        s.proc.stderr.close()
        self.assertEqual(s.proc.returncode, 1, out + "".join(s.stderr))
        doc = json.loads(out)
        assert_document(self, doc)
        self.assertEqual(doc["exit_status"], 1)
        self.assertEqual(len(doc["errors"]), 1, doc)
        return doc, "".join(s.stderr)

    def test_trap_while_serving(self):
        s = self.start()
        t0 = time.monotonic()
        with client.Client(s.addresses[0], 1) as c:
            c.send(client.request("fault_trap", b"", 7))
            with self.assertRaises(client.NoAnswerError):
                c.receive(1)
        doc, err = self.finish(s)  # stops by itself: the kernel is gone
        self.assertLess(time.monotonic() - t0, 10)
        self.assertEqual(doc["stopped_by"], "error")
        self.assertIn("failed: ", doc["errors"][0])
        self.assertIn("cudaq-rt-run: error: ", err)

    def test_hung_kernel_at_sigterm(self):
        s = self.start()
        with client.Client(s.addresses[0], 1) as c:
            c.send(client.request("spin_forever", b"", 8))
            with self.assertRaises(client.NoAnswerError):
                c.receive(0.5)
        t0 = time.monotonic()
        doc, err = self.finish(s, signal.SIGTERM)
        self.assertLess(time.monotonic() - t0, 10)  # drain 1 s + stop 1 s, then out
        self.assertIn("did not stop within 1 s: it is hung", doc["errors"][0])


def free_port_pair():
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            if port >= 65535:
                continue
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b:
                    b.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two consecutive free UDP ports")


class TwoGpuTest(UdpCase):
    def setUp(self):
        if GPU_COUNT < 2:
            self.skipTest(f"{GPU_COUNT} GPU on this machine")

    def test_two_gpus_consecutive_ports(self):
        port = free_port_pair()
        s = self.serve("--device", "0,1", "--bridge-arg", f"port={port}", gpus=2)
        self.assertEqual(s.addresses, [f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"])
        with multiprocessing.Pool(4) as pool:
            results = pool.map(load_worker, [(s.addresses[i % 2], 20000 + 1000 * i, 16,
                                              bytes([0xE0 + i]) * 8, 10) for i in range(4)])
        for r in results:
            self.assertEqual((r["wrong"], r["lost"]), (0, 0))
        doc = s.stop()
        self.assertEqual([g["device"] for g in doc["gpus"]], [0, 1])
        self.assertEqual(doc["gpus"][0]["served"], 20000 + 22000)
        self.assertEqual(doc["gpus"][1]["served"], 21000 + 23000)
        self.assertEqual(doc["total"]["served"], 86000)
        self.assertEqual(doc["total"]["dispatch"]["requests"], 86000)
        self.assertEqual(doc["total"]["latency_us"]["count"], 86000)

    def test_all_gpus_and_sigint(self):
        s = self.serve("--device", "all", gpus=GPU_COUNT)
        self.assertEqual(len(set(s.addresses)), GPU_COUNT)
        for a in s.addresses:
            with client.Client(a, 5) as c:
                self.assertEqual(c.call("echo", b"hi").result, b"hi")
        doc = s.stop(signal.SIGINT)
        self.assertEqual([g["served"] for g in doc["gpus"]], [1] * GPU_COUNT)
        self.assertEqual(doc["total"]["served"], GPU_COUNT)


if __name__ == "__main__":
    main(ARCH is not None, "no GPU on this machine: skipped", sys.stderr)
