#!/usr/bin/python3
"""Time to first response of cudaq-rt-run, by where the cubin comes from.

Each start is a new process (what a service pays at every start), timed from the process's own
--json report: CUDA context creation (cuInit and the device's primary context: the floor any CUDA
program pays), then package open and verify, cubin lookup or link, module load, launch, and the
first response. Three ways to get the cubin:

  package       cudaq-rt-link stored it in the package ahead of time
  cache         the link cache has it (a package without a link record)
  link at load  every start links with nvJitLink (--no-cache): what CUDA-Q realtime does today

The goal (first response within context creation + 20 ms) is a first response within context creation + 20 ms on the
package and cache paths. Needs a GPU; prints a table and asserts nothing.

  load_paths.py --pack P --link L --run R --app APP [--runs N]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def run_json(cmd, env):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall_ms = (time.perf_counter() - t0) * 1e3
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr}")
    return json.loads(r.stdout), wall_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pack", required=True)
    ap.add_argument("--link", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--app", required=True, help="the example application binary")
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="cudaq_rt_load_paths.")
    try:
        env = dict(os.environ, CUDAQ_RT_CACHE_DIR=os.path.join(tmp, "cache"))
        subprocess.run([a.pack, a.app, "-n", "linked", "-o", tmp], check=True, capture_output=True)
        subprocess.run([a.pack, a.app, "-n", "bare", "-o", tmp], check=True, capture_output=True)
        linked = os.path.join(tmp, "linked.cudaqpkg")
        bare = os.path.join(tmp, "bare.cudaqpkg")
        info, _ = run_json([a.run, bare, "--list", "--json", "--no-cache"], env)
        arch = info["device"]["arch"]
        subprocess.run([a.link, linked, "--arch", arch, "--no-cache"], check=True,
                       capture_output=True)
        # Fill the cache for the bare package (one link at load, not timed).
        run_json([a.run, bare, "--call", "echo", "--arg", "hex:00", "--json"], env)

        call = ["--call", "echo", "--arg", "hex:00", "--json"]
        paths = [("package", [a.run, linked] + call + ["--no-link"]),
                 ("cache", [a.run, bare] + call + ["--no-link"]),
                 ("link at load", [a.run, bare] + call + ["--no-cache"])]
        print(f"GPU: {info['device']['name']} ({arch}, driver {info['device']['driver']}); "
              f"{a.runs} starts each, medians, ms")
        cols = ["context", "open+verify", "cubin", "load", "launch", "1st resp", "to 1st resp",
                "over ctx", "process"]
        print(f"{'path':<13}" + "".join(f"{c:>12}" for c in cols))
        for name, cmd in paths:
            rows = []
            for _ in range(a.runs):
                doc, wall = run_json(cmd, env)
                if doc["cubin"]["source"] != name:
                    sys.exit(f"{name}: the run took the {doc['cubin']['source']} path")
                t = doc["times"]
                total = (t["context_ms"] + t["open_ms"] + t["cubin_ms"] + t["load_ms"] +
                         t["launch_ms"] + t["first_response_ms"])
                rows.append([t["context_ms"], t["open_ms"], t["cubin_ms"], t["load_ms"],
                             t["launch_ms"], t["first_response_ms"], total,
                             total - t["context_ms"], wall])
            med = [statistics.median(r[i] for r in rows) for i in range(len(cols))]
            print(f"{name:<13}" + "".join(f"{v:>12.2f}" for v in med))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
