#!/usr/bin/env python3
"""pack_throughput: how fast cudaq-rt-pack reads a large binary's device code, next to objcopy.

Usage:
  cmake --build build --target bench_pack_throughput          # libnccl.so.2, 5 repetitions
  bench/pack_throughput.py --pack build/bin/cudaq-rt-pack [--input FILE] [--reps N]
                           [--objcopy objcopy] [--tmp DIR]

For FILE (default: the CUDA toolkit's libnccl.so.2, 218 MB with a 126 MB __nv_relfatbin of 127
containers) it times, N times each after one untimed warm-up run so the file is in the page cache:
  - `cudaq-rt-pack -o TMP FILE` into a fresh directory (hash the file, split the section, write
    one blob per container as it is hashed, its writeback started at once, one syncfs, rename
    the package into place);
  - `cudaq-rt-pack --list FILE` (hash, split and list, nothing written);
  - `objcopy -O binary --only-section=__nv_relfatbin FILE OUT` (the section's bytes only);
  - `objcopy --dump-section __nv_relfatbin=OUT FILE COPY`: objcopy has no dump-only mode and,
    without COPY, would rewrite FILE in place, so this one also writes a full copy of the binary.
It prints the median wall time, CPU time (user + system) and throughput (MB/s of the input file
and of its __nv_relfatbin, MB = 10^6 bytes), the containers found and the package size. It
measures; it asserts nothing, and it is not part of the test run.
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

DEFAULT_INPUT = "/usr/local/cuda/lib64/libnccl.so.2"


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd, walls, cpus):
    """Runs `cmd`, appending its wall time and CPU time (user + system) to the lists."""
    cpu, start = cpu_seconds(), time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    walls.append(time.perf_counter() - start)
    cpus.append(cpu_seconds() - cpu)


def timed(cmd, reps):
    """Median wall and CPU seconds of `cmd` over `reps` runs, after one warm-up run."""
    run(cmd, [], [])
    walls, cpus = [], []
    for _ in range(reps):
        run(cmd, walls, cpus)
    return statistics.median(walls), statistics.median(cpus)


def tree_size(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pack", required=True, help="the cudaq-rt-pack executable")
    ap.add_argument("--input", default=DEFAULT_INPUT)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--objcopy", default="objcopy")
    ap.add_argument("--tmp", default=None, help="scratch directory (default: the system's)")
    args = ap.parse_args()

    if not os.path.isfile(args.input):
        print(f"pack_throughput: {args.input} not found (pass --input)", file=sys.stderr)
        return 1
    input_size = os.path.getsize(args.input)
    scratch = tempfile.mkdtemp(prefix="cudaq_rt_bench.", dir=args.tmp)
    try:
        section = os.path.join(scratch, "relfatbin.bin")
        only = [args.objcopy, "-O", "binary", "--only-section=__nv_relfatbin", args.input, section]
        t_only = timed(only, args.reps)
        section_size = os.path.getsize(section)

        copy = os.path.join(scratch, "copy.so")
        dump = [args.objcopy, f"--dump-section=__nv_relfatbin={section}", args.input, copy]
        t_dump = timed(dump, args.reps)
        os.remove(copy)

        t_list = timed([args.pack, "--list", args.input], args.reps)
        listing = subprocess.run([args.pack, "--list", args.input, "--json"], check=True,
                                 capture_output=True, text=True).stdout
        manifest = json.loads(listing)
        containers = manifest["containers"]

        out = os.path.join(scratch, "out")
        pack_times, pack_cpus = [], []
        package_size = 0
        for i in range(args.reps + 1):  # the first run warms up and is not counted
            shutil.rmtree(out, ignore_errors=True)
            os.mkdir(out)
            walls, cpus = (pack_times, pack_cpus) if i else ([], [])
            run([args.pack, "-o", out, "-n", "bench", args.input], walls, cpus)
            package_size = tree_size(os.path.join(out, "bench.cudaqpkg"))
        t_pack = statistics.median(pack_times), statistics.median(pack_cpus)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    mb = 1e6
    print(f"input          {args.input}")
    print(f"input size     {input_size} bytes ({input_size / mb:.1f} MB)")
    print(f"__nv_relfatbin {section_size} bytes ({section_size / mb:.1f} MB), "
          f"{len(containers)} containers, "
          f"{sum(len(c['entries']) for c in containers)} entries")
    print(f"package size   {package_size} bytes ({package_size / mb:.1f} MB)")
    print(f"repetitions    {args.reps} (medians, after one warm-up run; MB/s from wall time)")
    print(f"{'':34} {'wall s':>7} {'cpu s':>7} {'file MB/s':>10} {'section MB/s':>13}")
    for name, t in [("cudaq-rt-pack (write package)", t_pack),
                    ("cudaq-rt-pack --list", t_list),
                    ("objcopy -O binary --only-section", t_only),
                    ("objcopy --dump-section (+copy)", t_dump)]:
        wall, cpu = t
        print(f"{name:34} {wall:7.3f} {cpu:7.3f} {input_size / mb / wall:10.0f} "
              f"{section_size / mb / wall:13.0f}")
    print(f"pack runs (s)  {' '.join(f'{t:.3f}' for t in pack_times)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
