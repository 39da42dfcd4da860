#!/usr/bin/env python3
"""remote_cache_bench: time to a usable cubin on a fresh machine, remote hit vs local link.

Usage:
  cmake --build build --target bench_remote_cache
  bench/remote_cache_bench.py --pack build/bin/cudaq-rt-pack --link build/bin/cudaq-rt-link
                              [--nvcc nvcc] [--include libdispatch/include] [--runs N]
                              [--tmp DIR]      (nginx: $NGINX, else on PATH or /usr/sbin)

The two handler sets of link_bench.py (its generator): small (examples/handlers, 4 handlers) and
medium (36 generated handlers). nginx with WebDAV on a loopback port is the remote cache (as in
tests/integration/test_remote_cache.py). For each set, on sm_90, each run a fresh machine (an
empty local cache directory):
  - local link: no remote cache, the link runs (nvJitLink's own time and the process's wall);
  - remote hit: the entry is on the server; time_ms is the arch's whole lookup in the process
    (local miss, GET, decode and digests, the cubin's checks, the copy into the local cache with
    its fsync), wall the whole process;
  - GET alone: the entry fetched over loopback with Python's http.client (transfer, no checks).
Then the two-directory question: one .cu built with nvcc -rdc in two directories, and twice in
one, packed; are the container digests equal?
It measures and asserts nothing; it is not part of the test run.
"""
import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import link_bench  # noqa: E402  the handler sets' generator
from test_remote_cache import Nginx  # noqa: E402  the nginx fixture

ARCH = "sm_90"


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"remote_cache_bench: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr}")
    return r


def fresh_link(args, pkg, tmp, remote, n):
    """(wall ms, the arch's JSON) of a link on a fresh machine."""
    env = dict(os.environ, CUDAQ_RT_CACHE_DIR=tempfile.mkdtemp(prefix=f"m{n}.", dir=tmp))
    env.pop("CUDAQ_RT_REMOTE_CACHE", None)
    env.pop("CUDAQ_RT_CACHE_DISABLE", None)
    cmd = [args.link, pkg, "-a", ARCH, "--json", "--no-store"]
    if remote:
        cmd += ["--remote-cache", remote]
    start = time.perf_counter()
    r = run(cmd, env)
    wall = (time.perf_counter() - start) * 1e3
    return wall, json.loads(r.stdout)["archs"][0]


def get_ms(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port)
    start = time.perf_counter()
    c.request("GET", path)
    body = c.getresponse().read()
    ms = (time.perf_counter() - start) * 1e3
    c.close()
    return ms, len(body)


def two_directories(args, tmp):
    src = os.path.join(link_bench.HANDLERS, "arith.cu")
    flags = ["-rdc=true", "-gencode", "arch=compute_80,code=[sm_80,lto_80]", "-std=c++17",
             "-I" + args.include]
    digests = {}
    for name, where in (("dir a", "a"), ("dir b", "b"), ("dir a again", "a")):
        d = os.path.join(tmp, "two", where, "src")
        os.makedirs(d, exist_ok=True)
        shutil.copy(src, d)
        obj = os.path.join(d, "arith.o")
        # In the directory, on a relative path: only the directory differs.
        run(["sh", "-c", f'cd "{d}" && exec "$0" "$@"', args.nvcc, *flags, "-c", "arith.cu",
             "-o", "arith.o"])
        out = tempfile.mkdtemp(prefix="pkg.", dir=tmp)
        run([args.pack, "-o", out, "-n", "app", obj])
        with open(os.path.join(out, "app.cudaqpkg", "manifest.json")) as f:
            digests[name] = json.load(f)["containers"][0]["digest"]
    print("\nthe same arith.cu, nvcc -rdc=true, packed (container digest):")
    for name, d in digests.items():
        print(f"  {name:12s} {d}")
    print(f"  two directories: {'equal' if digests['dir a'] == digests['dir b'] else 'DIFFERENT'}"
          f"; one directory twice: "
          f"{'equal' if digests['dir a'] == digests['dir a again'] else 'DIFFERENT'}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pack", default=shutil.which("cudaq-rt-pack"))
    p.add_argument("--link", default=shutil.which("cudaq-rt-link"))
    p.add_argument("--nvcc", default=os.environ.get("NVCC", "nvcc"))
    p.add_argument("--include", default=os.path.join(ROOT, "libdispatch", "include"))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--tmp")
    args = p.parse_args()
    if not args.pack or not args.link:
        sys.exit("remote_cache_bench: give --pack and --link")

    tmp = tempfile.mkdtemp(prefix="remote_cache_bench.", dir=args.tmp)
    server = None
    try:
        packages = link_bench.build_sets(args, tmp)
        server = Nginx(os.path.join(tmp, "nginx"))
        url = server.url("cache/bench")
        n = 0
        rows = []
        for name, pkg in packages.items():
            links, hits, gets = [], [], []
            for _ in range(args.runs):
                n += 1
                links.append(fresh_link(args, pkg, tmp, None, n))
            n += 1
            _, first = fresh_link(args, pkg, tmp, url, n)  # stores the entry on the server
            for _ in range(args.runs):
                n += 1
                wall, a = fresh_link(args, pkg, tmp, url, n)
                assert a["source"] == "remote", a
                hits.append((wall, a))
                gets.append(get_ms(server.port, "/cache/bench/" + first["cache_key"][7:]))
            med = statistics.median
            rows.append((name,
                         med(w for w, _ in links), med(a["cubin"]["link_ms"] for _, a in links),
                         med(w for w, _ in hits), med(a["cubin"]["time_ms"] for _, a in hits),
                         med(g for g, _ in gets), gets[0][1]))
        print(f"\ntime to a usable {ARCH} cubin on a fresh machine (median of {args.runs}):")
        print(f"{'set':8s} {'link wall':>10s} {'nvJitLink':>10s} {'hit wall':>9s} "
              f"{'hit lookup':>11s} {'GET only':>9s} {'entry':>9s} {'link/lookup':>12s}")
        for name, lw, lms, hw, hms, g, size in rows:
            print(f"{name:8s} {lw:8.1f}ms {lms:8.1f}ms {hw:7.1f}ms {hms:9.2f}ms {g:7.2f}ms "
                  f"{size:8d}B {lms / hms:11.0f}x")
        two_directories(args, tmp)
    finally:
        if server:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
