#!/usr/bin/python3
"""The UDP round trip through `cudaq-rt-run --serve`, next to its parts, in one run (prints a
table, asserts nothing; bench/udp_rtt.md holds results):

  bare UDP echo    bench/udp_echo.c: the same socket options and batching, no GPU
  UDP via GPU      cudaq-rt-run PKG --serve (udp bridge, wait=spin): the echo handler
  server part      the same run, as the bridge measures it (datagram arrival to response departure)
  loopback         cudaq-rt-run PKG --bench (the loopback bridge: the ring and the kernel alone)
  floor            ../shared/probe/floor.cu (beside the repository) variant A (one 16-byte word each way)

The bare echo and the server run with threads that spin (the bridge's default, wait=spin), then
both with threads that sleep in recvmmsg (wait=block).
Each UDP row is bench/udp_rtt_client.c: one request at a time, 8-byte payload, polling its socket.
Goal: UDP via GPU <= bare echo + loopback + 1 us (p50).

  udp_rtt.py --pack P --link L --run R --app APP --echo udp_echo --client udp_rtt_client
             [--floor floor.cu or a built binary] [--requests N] [--bridge NAME]
             [--compare-bridge NAME] [--sizes 8,1024,16384]

--sizes adds, for each payload size after the first, the bare echo, the UDP and the loopback rows of
that size (rings of slot_size 16448 for them), against the goal for datagrams of a kilobyte and more
(bench/payload_sizes.md, "The goals"): UDP via GPU <= bare echo + loopback of the same size.

--ab ARGS --rounds N measures, in place of the tables above, N alternating rounds for each size of
--sizes: the bare echo, the bare echo with its two threads handing each datagram over (udp_echo
handoff), the server as configured, and the server with the bridge arguments ARGS added (for
example threads=1); p50 / p99 us, and the server's part of each: its p50, and the bridge's
split of it as means (arrival to the request written into the ring, arrival to the answer seen,
the answer seen to sendmmsg returned). --clients K runs K clients at once in each row (the
median client's p50 / p99, and the requests a second of all of them).

--cpus S,C runs the servers' threads from CPU S (the bare echo under taskset, the bridge with
cpu=S; two threads on S and S+1) and the clients from CPU C (client k on C+k); the server
process's other threads (the CUDA driver's) stay where the system puts them. Without it nothing
is pinned.

--bridge serves the main rows through another bridge; --compare-bridge serves the spinning row
again through a second one. Both take a variant of the udp bridge (udp_no_push, built
by the bench_loopback_rtt_build target: the bridge without the push of its responses).
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time


from payload_sizes import SLOT_SIZE  # the ring payload_sizes.py measures: 16 KB + the header


# --cpus: the servers' first CPU and the clients' (None: not pinned).
SERVER_CPU = None
CLIENT_CPU = None


def pinned(cpus, command):
    """command under taskset -c CPUS, where CPUS is given."""
    return command if cpus is None else ["taskset", "-c", cpus] + command


def client_run(client, address, n, size=8, clients=1):
    """p50 and p99 us of one client's run; with several clients at once, the medians of theirs,
    and the requests a second they had answered together (from the first start to the last end)."""
    start = time.monotonic()
    cpu = [None if CLIENT_CPU is None else str(CLIENT_CPU + k) for k in range(clients)]
    procs = [subprocess.Popen(pinned(cpu[k], [client, address, str(n), str(size)]),
                              stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for k in range(clients)]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=600)
            m = re.search(r"p50=([\d.]+) p90=([\d.]+) p99=([\d.]+).*lost=(\d+) wrong=(\d+)", out)
            if p.returncode != 0 or not m or m.group(5) != "0":
                raise RuntimeError(f"{client}: {out}{err}")
            results.append((float(m.group(1)), float(m.group(3)), out.strip()))
    finally:
        for p in procs:  # a failed run leaves no client behind
            if p.poll() is None:
                p.kill()
                p.wait()
    rate = clients * n / (time.monotonic() - start)
    if clients == 1:
        return results[0][0], results[0][1], results[0][2], rate
    p50s, p99s = sorted(r[0] for r in results), sorted(r[1] for r in results)
    return p50s[clients // 2], p99s[clients // 2], f"{clients} clients", rate


def echo_row(echo, client, n, wait="spin", size=8, clients=1):
    cpus = None
    if SERVER_CPU is not None:  # handoff's two threads on two CPUs, as the bridge's threads=2
        cpus = f"{SERVER_CPU},{SERVER_CPU + 1}" if wait == "handoff" else str(SERVER_CPU)
    p = subprocess.Popen(pinned(cpus, [echo, "0", wait]), stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        address = line.split()[-1]
        return client_run(client, address, n, size, clients)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(10)


def serve_row(run, pkg, client, n, env, wait="spin", bridge="udp", size=8, extra="", clients=1):
    bridge_arg = "wait=" + wait + ("" if size == 8 else f",slot_size={SLOT_SIZE}")
    bridge_arg += "," + extra if extra else ""
    bridge_arg += f",cpu={SERVER_CPU}" if SERVER_CPU is not None else ""
    p = subprocess.Popen([run, pkg, "--serve", "--json", "--bridge", bridge, "--bridge-arg",
                          bridge_arg],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    address = None
    while address is None:
        line = p.stderr.readline()
        if not line:
            raise RuntimeError("cudaq-rt-run --serve did not start: " + p.stdout.read())
        m = re.match(r"cudaq-rt-run: serving on (\S+) ", line)
        address = m.group(1) if m else None
    try:
        row = client_run(client, address, n, size, clients)
    finally:
        p.send_signal(signal.SIGTERM)
        out = p.stdout.read()
        p.wait(30)
    total = json.loads(out)["total"]
    lat, c = total["latency_us"], total["bridge"]
    # The bridge's split of a request's time in the server, per request (means, us).
    n_in, n_out = max(1, c.get("requests_forwarded", 0)), max(1, c.get("responses_sent", 0))
    split = (c.get("intake_ns", 0) / n_in / 1000, c.get("to_answer_ns", 0) / n_out / 1000,
             c.get("send_ns", 0) / n_out / 1000)
    return row, (lat["p50"], lat["p99"], split)


def split(server):
    """The server's part: its p50, then the means of the bridge's split of it."""
    intake, to_answer, send = server[2]
    return (f"{server[0]:.2f}: in {intake:.2f}, to answer {to_answer:.2f}, "
            f"send {send:.2f}")


def ab_rounds(a, pkg, env):
    """--ab: alternating rounds, each size, the bridge as configured against it with a.ab."""
    n, k = a.requests, a.clients
    for size in [int(x) for x in a.sizes.split(",")]:
        who = "one client" if k == 1 else f"{k} clients at once (the median client's p50 / p99)"
        print(f"\n{size} B, {n} requests a client, {who}, one request at a time each; p50 / p99 "
              "us, the server's part in brackets" + ("" if k == 1 else ", requests a second"))
        print(f"| round | bare echo | bare echo, handoff | --serve | --serve, {a.ab} |")
        print("| --- | --- | --- | --- | --- |")

        def cell(row, server=None):
            text = f"{row[0]:.2f} / {row[1]:.2f}"
            text += f" ({split(server)})" if server else ""
            return text + ("" if k == 1 else f", {row[3] / 1e3:.0f} k/s")

        for r in range(a.rounds):
            e = echo_row(a.echo, a.client, n, size=size, clients=k)
            h = echo_row(a.echo, a.client, n, wait="handoff", size=size, clients=k)
            u, us = serve_row(a.run, pkg, a.client, n, env, bridge=a.bridge, size=size, clients=k)
            v, vs = serve_row(a.run, pkg, a.client, n, env, bridge=a.bridge, size=size,
                              extra=a.ab, clients=k)
            print(f"| {r + 1} | {cell(e)} | {cell(h)} | {cell(u, us)} | {cell(v, vs)} |")
            sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for k in ("pack", "link", "run", "app", "echo", "client"):
        ap.add_argument("--" + k, required=True)
    ap.add_argument("--floor", help="floor.cu (built here with nvcc) or a built binary")
    ap.add_argument("--requests", type=int, default=100000)
    ap.add_argument("--bridge", default="udp", help="the bridge of the main rows (default udp)")
    ap.add_argument("--compare-bridge", help="a variant of the udp bridge (e.g. udp_no_push, "
                    "bench/CMakeLists.txt) to serve the same way, for a row of its own")
    ap.add_argument("--sizes", default="8", help="payload sizes, comma-separated; the first is "
                    "the main table's (default 8), each other one adds its rows")
    ap.add_argument("--ab", help="bridge arguments to measure against the bridge as configured, "
                    "in alternating rounds (replaces the tables)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of --ab (default 3)")
    ap.add_argument("--clients", type=int, default=1, help="--ab: clients at once (default 1)")
    ap.add_argument("--cpus", help="S,C: the servers' threads from CPU S, the clients from CPU C")
    a = ap.parse_args()
    if a.cpus:
        global SERVER_CPU, CLIENT_CPU
        m = re.fullmatch(r"(\d+),(\d+)", a.cpus)
        if not m:
            ap.error(f"--cpus S,C: two CPU numbers, got '{a.cpus}'")
        SERVER_CPU, CLIENT_CPU = int(m.group(1)), int(m.group(2))
        # Two server threads (the handoff echo, threads=2) take S and S+1; a client there would
        # share a CPU with a spinning thread (8 ms a round trip, measured).
        if {SERVER_CPU, SERVER_CPU + 1} & set(range(CLIENT_CPU, CLIENT_CPU + a.clients)):
            ap.error(f"--cpus {a.cpus}: the clients' CPUs ({CLIENT_CPU} on) would share "
                     f"{SERVER_CPU} or {SERVER_CPU + 1} with a server thread")

    tmp = tempfile.mkdtemp(prefix="cudaq-rt-udp-rtt.")
    env = dict(os.environ)
    env.setdefault("CUDAQ_RT_CACHE_DIR", os.path.join(tmp, "cache"))  # a cache of its own
    try:
        subprocess.run([a.pack, a.app, "--name", "example", "-o", tmp], check=True,
                       capture_output=True)
        pkg = os.path.join(tmp, "example.cudaqpkg")
        arch = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.split()[0].replace(".", "")
        for bridge in (a.bridge, "loopback") + ((a.compare_bridge,) if a.compare_bridge else ()):
            subprocess.run([a.link, pkg, "--arch", "sm_" + arch, "--bridge", bridge], check=True,
                           capture_output=True, env=env)
        if a.ab:
            return ab_rounds(a, pkg, env)
        rows = []
        echo = echo_row(a.echo, a.client, a.requests)
        rows.append(("bare UDP echo (C, no GPU)", echo[0], echo[1]))
        udp, server = serve_row(a.run, pkg, a.client, a.requests, env, bridge=a.bridge)
        rows.append(("UDP via cudaq-rt-run --serve" +
                     ("" if a.bridge == "udp" else f", bridge {a.bridge}"), udp[0], udp[1]))
        rows.append(("  of which in the server (bridge)", server[0], server[1]))
        if a.compare_bridge:
            other, other_server = serve_row(a.run, pkg, a.client, a.requests, env,
                                            bridge=a.compare_bridge)
            rows.append((f"UDP via --serve, bridge {a.compare_bridge}", other[0], other[1]))
            rows.append(("  of which in the server (bridge)", other_server[0], other_server[1]))
        echo_block = echo_row(a.echo, a.client, a.requests, "block")
        rows.append(("bare UDP echo, blocking recvmmsg", echo_block[0], echo_block[1]))
        udp_block, server_block = serve_row(a.run, pkg, a.client, a.requests, env, "block",
                                             a.bridge)
        rows.append(("UDP via --serve, wait=block", udp_block[0], udp_block[1]))
        rows.append(("  of which in the server (bridge)", server_block[0], server_block[1]))
        bench = subprocess.run([a.run, pkg, "--bench", str(a.requests), "--json"],
                               capture_output=True, text=True, env=env, check=True)
        lb = json.loads(bench.stdout)["bench"]["latency_us"]
        rows.append(("loopback (cudaq-rt-run --bench)", lb["p50"], lb["p99"]))
        if a.floor:
            binary = a.floor
            if a.floor.endswith(".cu"):
                binary = os.path.join(tmp, "floor")
                subprocess.run([os.environ.get("NVCC", "nvcc"), "-O2", "-arch=sm_" + arch,
                                a.floor, "-o", binary], check=True)
            out = subprocess.run([binary, str(a.requests)], capture_output=True, text=True,
                                 check=True).stdout
            m = re.search(r"A one 16B store.*?p50=([\d.]+) p90=[\d.]+ p99=([\d.]+)", out)
            if m:
                rows.append(("floor.cu A (16 bytes each way)", float(m.group(1)),
                             float(m.group(2))))
        print(f"UDP round trip, {a.requests} requests one at a time, 8-byte payload, same host")
        print(f"| path | p50 us | p99 us |\n| --- | --- | --- |")
        for name, p50, p99 in rows:
            print(f"| {name} | {p50:.2f} | {p99:.2f} |")
        budget = echo[0] + lb["p50"] + 1.0
        print(f"goal (p50): UDP via GPU {udp[0]:.2f} us <= bare echo {echo[0]:.2f} + loopback "
              f"{lb['p50']:.2f} + 1 = {budget:.2f} us: {'met' if udp[0] <= budget else 'not met'}")
        floor_rows = [p50 for name, p50, _ in rows if name.startswith("floor.cu")]
        if floor_rows:
            budget = echo[0] + floor_rows[0] + 1.0
            print(f"the 8-byte goal (p50): UDP via GPU {udp[0]:.2f} us <= bare echo {echo[0]:.2f} "
                  f"+ floor.cu A {floor_rows[0]:.2f} + 1 = {budget:.2f} us: "
                  f"{'met' if udp[0] <= budget else 'not met'}")
        sizes = [int(x) for x in a.sizes.split(",")][1:]
        if sizes:
            n = max(1000, a.requests // 5)
            print(f"\nby payload size, {n} requests one at a time, rings of slot_size {SLOT_SIZE}")
            print("| payload | bare UDP echo | UDP via --serve | in the server | loopback | goal |")
            print("| --- | --- | --- | --- | --- | --- |")
        for size in sizes:
            e = echo_row(a.echo, a.client, n, size=size)
            u, srv = serve_row(a.run, pkg, a.client, n, env, bridge=a.bridge, size=size)
            payload = os.path.join(tmp, f"payload_{size}")
            with open(payload, "wb") as f:
                f.write(bytes(i & 0xFF for i in range(size)))
            bench = subprocess.run([a.run, pkg, "--call", "echo", "--arg", "@" + payload,
                                    "--bench", str(n), "--json", "--bridge-arg",
                                    f"slot_size={SLOT_SIZE}"],
                                   capture_output=True, text=True, env=env, check=True)
            loop = json.loads(bench.stdout)["bench"]["latency_us"]
            goal = e[0] + loop["p50"]
            print(f"| {size} B | {e[0]:.2f} / {e[1]:.2f} | {u[0]:.2f} / {u[1]:.2f} | "
                  f"{srv[0]:.2f} / {srv[1]:.2f} | {loop['p50']:.2f} / {loop['p99']:.2f} | "
                  f"{goal:.2f}: {'met' if u[0] <= goal else 'not met'} |")
            sys.stdout.flush()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
