#!/usr/bin/env python3
"""The request path at every payload size, on a GPU: the example's echo through cudaq-rt-run's
--bench (the runtime's load path), per payload size, next to the transport floor and the copy
engine's round trip measured in the same run.

    payload_sizes.py BUILD_OR_BUNDLE [--floor FLOOR_BIN] [--copy COPY_RTT_BIN] [--quick]

BUILD_OR_BUNDLE is a build tree or a bundle from scripts/gpu-bundle.sh. FLOOR_BIN is
../shared/probe/floor.cu built (its line A: one 16-byte word each way), COPY_RTT_BIN
bench/probe/copy_rtt.cu built. Rows, each a cudaq-rt-run process of its own:
  unified, bulk   the unified kernel, the ring's default (on sm_90 and later, requests up to a
                  512-byte payload as cells whose tails the engine brings in, larger ones in bulk)
  unified, bulk=33  every frame over 32 bytes in bulk (the default before the engine's tails)
  unified, cells  the same with bulk=0 (every frame as stamped cells: the ring before bulk frames)
  warp, bulk      the warp dispatcher (layout=lanes, 256 slots)
  unified, ARGS   with --args-row ARGS: the default and ARGS (thresholds, compared)
then throughput at 32 in flight (1 KB and 16 KB) and the warp dispatcher's 8-byte echo at 256 in
flight, fed by one host thread and by two (feeders=2), and with --depths requests/s by requests in
flight. The goal column is the one
bench/payload_sizes.md states ("The goals"): the floor's p50 plus the payload's time each way at the
copy probe's rate for that size, times two. It prints; it asserts nothing."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

SIZES = [8, 64, 256, 512, 1024, 4096, 16384]
SLOT_SIZE = 16448  # 16 KB of payload + the header, rounded to 16
HANDLER = "echo"


def requests_for(size, quick):
    n = 20000 if size <= 1024 else 10000 if size <= 4096 else 5000
    return max(1000, n // 5) if quick else n


def run_bench(build, package, size, args, bridge_arg, requests, inflight, tmp):
    payload = os.path.join(tmp, f"payload_{size}")
    with open(payload, "wb") as f:
        f.write(bytes((i * 131 + 7) & 0xFF for i in range(size)))
    cmd = [os.path.join(build, "bin", "cudaq-rt-run"), package, "--call", HANDLER, "--arg",
           "@" + payload, "--bench", str(requests), "--inflight", str(inflight), "--json",
           "--bridge-arg", bridge_arg] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return None, (p.stderr or p.stdout).strip().splitlines()[-1:]
    return json.loads(p.stdout)["bench"], None


def table_cell(doc, err, show):
    """A table's cell for one run: show(doc), with the wrong answers if any, or the failure."""
    if doc is None:
        return f"failed: {err}"
    return show(doc) + (f", {doc['wrong']} wrong" if doc["wrong"] else "")


def floor_p50(floor_bin):
    if not floor_bin:
        return None, None
    out = subprocess.run([floor_bin, "100000"], capture_output=True, text=True, timeout=120).stdout
    for line in out.splitlines():
        if line.startswith("A"):
            m50, m99 = re.search(r"p50=([\d.]+)", line), re.search(r"p99=([\d.]+)", line)
            print("floor.cu " + line.strip())
            return float(m50.group(1)), float(m99.group(1))
    return None, None


def copy_rates(copy_bin):
    rates = {}
    if not copy_bin:
        return rates
    out = subprocess.run([copy_bin, "5000"] + [str(s) for s in SIZES], capture_output=True,
                         text=True, timeout=300).stdout
    for line in out.splitlines():
        print("copy_rtt " + line.strip())
        m = re.match(r"copy (\d+) p50 ([\d.]+) us p99 ([\d.]+) us rate ([\d.]+) GB/s", line)
        if m:
            rates[int(m.group(1))] = (float(m.group(2)), float(m.group(4)))
    return rates


def ab_rounds(build, package, extra, rounds, quick, tmp):
    """The default configuration against `extra` added to it, one run of each after the other,
    so that a drift of the host between runs lands on both: p50 us at 1 in flight, M requests/s
    at 32."""
    base = f"slots=64,slot_size={SLOT_SIZE}"
    print(f"\ndefault against {extra}, alternating, {rounds} rounds (p50 us at 1 in flight, "
          "M requests/s at 32)")
    print("| payload | in flight | default | " + extra + " |")
    print("| --- | --- | --- | --- |")
    for size in (1024, 4096, 16384):
        for inflight in (1, 32):
            got = {False: [], True: []}
            for _ in range(rounds):
                for with_extra in (False, True):
                    doc, err = run_bench(build, package, size, [],
                                         base + ("," + extra if with_extra else ""),
                                         requests_for(size, quick) * (4 if inflight > 1 else 1),
                                         inflight, tmp)
                    if doc is None or doc["wrong"]:
                        got[with_extra].append(f"failed: {err}" if doc is None else "wrong")
                    elif inflight == 1:
                        got[with_extra].append(f"{doc['latency_us']['p50']:.2f}")
                    else:
                        got[with_extra].append(f"{doc['requests_per_s'] / 1e6:.3f}")
            print(f"| {size} B | {inflight} | " + ", ".join(got[False]) + " | " +
                  ", ".join(got[True]) + " |")
            sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build")
    ap.add_argument("--floor")
    ap.add_argument("--copy")
    ap.add_argument("--package", help="a linked example package (default: link one here)")
    ap.add_argument("--quick", action="store_true", help="a fifth of the requests")
    ap.add_argument("--before", help="another loopback bridge library (an earlier build) for a "
                    "row of its own, linked at load")
    ap.add_argument("--bridge-row", action="append", default=[],
                    help="a bridge (name or library) for a row of its own: a bench variant")
    ap.add_argument("--args-row", action="append", default=[],
                    help="bridge options added to the unified kernel's for a row of its own "
                    "(e.g. bulk=1057,response_bulk=129): thresholds compared in one run")
    ap.add_argument("--depths", action="store_true",
                    help="also requests/s by requests in flight (1 to 32) at 1 KB and 16 KB, for "
                    "the default and --before")
    ap.add_argument("--ab", metavar="ARGS",
                    help="only this: the default against the bridge options ARGS, alternating run "
                    "by run (--rounds times), at 1 and 32 in flight, 1 KB to 16 KB")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--handler", default="echo", help="the handler (default echo; sum_i32 reads "
                    "the payload and answers 8 bytes)")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    here = os.path.dirname(os.path.abspath(__file__))
    env_bridges = os.path.join(build, "lib", "cudaq-rt", "bridges")
    os.environ.setdefault("CUDAQ_RT_BRIDGE_PATH", env_bridges)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("CUDAQ_RT_CACHE_DIR", os.path.join(tmp, "cache"))
        package = a.package
        if not package:
            subprocess.run(["bash", os.path.join(here, "..", "tests", "gpu", "link_example.sh"),
                            os.path.join(build, "bin", "cudaq-rt-pack"),
                            os.path.join(build, "bin", "cudaq-rt-link"),
                            os.path.join(build, "examples", "cudaq_rt_example_app"),
                            os.path.join(tmp, "example")], check=True, stdout=subprocess.DEVNULL)
            package = os.path.join(tmp, "example", "example.cudaqpkg")
        if a.ab:
            ab_rounds(build, package, a.ab, a.rounds, a.quick, tmp)
            return
        f50, _ = floor_p50(a.floor)
        rates = copy_rates(a.copy)
        rows = [("unified, bulk", [], f"slots=64,slot_size={SLOT_SIZE}"),
                ("unified, bulk=33", [], f"slots=64,slot_size={SLOT_SIZE},bulk=33"),
                ("unified, cells", [], f"slots=64,slot_size={SLOT_SIZE},bulk=0"),
                ("warp, bulk", ["--dispatcher", "warp"], f"slots=256,slot_size={SLOT_SIZE}")]
        if a.before:
            rows.append(("unified, --before", ["--bridge", os.path.abspath(a.before)],
                         f"slots=64,slot_size={SLOT_SIZE}"))
        for bridge in a.bridge_row:
            rows.append((f"unified, {os.path.basename(bridge)}", ["--bridge", bridge],
                         f"slots=64,slot_size={SLOT_SIZE}"))
        for extra in a.args_row:
            rows.append((f"unified, {extra}", [], f"slots=64,slot_size={SLOT_SIZE},{extra}"))
        global HANDLER
        HANDLER = a.handler
        print(f"\n1 in flight, p50 / p99 us (slot_size={SLOT_SIZE}; goal: 2 x (floor p50 + "
              "the payload each way at the copy rate))")
        header = "| payload | " + " | ".join(r[0] for r in rows) + " | goal |"
        print(header)
        print("|" + " --- |" * (len(rows) + 2))
        for size in SIZES:
            cells = []
            for _, args, bridge_arg in rows:
                doc, err = run_bench(build, package, size, args, bridge_arg,
                                     requests_for(size, a.quick), 1, tmp)
                cells.append(table_cell(doc, err, lambda d: "{p50:.2f} / {p99:.2f}".format(
                    **d["latency_us"])))
            goal = "-"
            if f50 is not None and size in rates:
                goal = f"{2 * (f50 + 2 * size / (rates[size][1] * 1e3)):.2f}"
            print(f"| {size} B | " + " | ".join(cells) + f" | {goal} |")
            sys.stdout.flush()
        print("\nthroughput")
        extra_rows = [(f"unified, {extra}", [], f"slots=64,slot_size={SLOT_SIZE},{extra}", size, 32)
                      for extra in a.args_row for size in (1024, 16384)]
        if a.before:
            extra_rows += [("unified, --before", ["--bridge", os.path.abspath(a.before)],
                            f"slots=64,slot_size={SLOT_SIZE}", size, 32) for size in (1024, 16384)]
        for label, args, bridge_arg, size, inflight in extra_rows + [
                ("unified, bulk", [], f"slots=64,slot_size={SLOT_SIZE}", 1024, 32),
                ("unified, bulk", [], f"slots=64,slot_size={SLOT_SIZE}", 16384, 32),
                ("unified, bulk=33", [], f"slots=64,slot_size={SLOT_SIZE},bulk=33", 1024, 32),
                ("unified, cells", [], f"slots=64,slot_size={SLOT_SIZE},bulk=0", 1024, 32),
                ("unified, cells", [], f"slots=64,slot_size={SLOT_SIZE},bulk=0", 16384, 32),
                ("warp, bulk", ["--dispatcher", "warp"], "slots=256", 8, 256),
                ("warp, two feeders", ["--dispatcher", "warp"], "slots=256,feeders=2", 8, 256),
                ("warp, bulk", ["--dispatcher", "warp"], f"slots=256,slot_size={SLOT_SIZE}",
                 1024, 256)]:
            n = 200000 if size <= 8 else 20000
            doc, err = run_bench(build, package, size, args, bridge_arg,
                                 n // 5 if a.quick else n, inflight, tmp)
            if doc is None:
                print(f"{label}, {size} B, {inflight} in flight: failed: {err}")
                continue
            rps = doc["requests_per_s"]
            print(f"{label}, {size} B, {inflight} in flight: {rps / 1e6:.3f} M requests/s, "
                  f"{rps * size / 1e9:.3f} GB/s of payload each way, p50 "
                  f"{doc['latency_us']['p50']:.2f} us, {doc['wrong']} wrong")
            sys.stdout.flush()

        if a.depths:
            print("\nby requests in flight, M requests/s (GB/s of payload each way)")
            variants = [("unified, bulk", [])]
            if a.before:
                variants.append(("unified, --before", ["--bridge", os.path.abspath(a.before)]))
            depths = [1, 2, 4, 8, 16, 32]
            print("| payload | row | " + " | ".join(str(d) for d in depths) + " |")
            print("|" + " --- |" * (len(depths) + 2))
            for size in (1024, 16384):
                for label, args in variants:
                    cells = []
                    for d in depths:
                        doc, err = run_bench(build, package, size, args,
                                             f"slots=64,slot_size={SLOT_SIZE}",
                                             4000 if a.quick else 20000, d, tmp)
                        cells.append(table_cell(doc, err, lambda r: "{:.3f} ({:.2f})".format(
                            r["requests_per_s"] / 1e6, r["requests_per_s"] * size / 1e9)))
                    print(f"| {size} B | {label} | " + " | ".join(cells) + " |")
                    sys.stdout.flush()


if __name__ == "__main__":
    main()
