#!/usr/bin/env python3
"""oci_transfer: push and pull of packages through a registry, ours next to skopeo's.

Usage:
  bench/oci_transfer.py --pack build/bin/cudaq-rt-pack --link build/bin/cudaq-rt-link
                        --app build/examples/cudaq_rt_example_app [--runs N]
  (Debian's docker-registry and skopeo: $DOCKER_REGISTRY, $SKOPEO, else on PATH)

Two packages: the example as packed (no cubins), and the example linked for 4 archs (sm_80,
sm_86, sm_89, sm_90). For each, the registry started on a loopback port (tests/integration/
registry.py), each run into a repository of its own:
  - push: `cudaq-rt-pack/link --push` against `skopeo copy oci:PKG docker://...`;
  - pull: `cudaq-rt-pack --pull` against `skopeo copy docker://... oci:DIR`;
  - a second push of the same package (HEAD only: nothing to send);
bytes as the registry's access log counts them (response bodies; upload bodies are the blobs'
sizes), wall time of the whole process, median of the runs. It measures and asserts nothing.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../tests/integration"))
from registry import Registry, skopeo  # noqa: E402


def timed(cmd, **kw):
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {r.stderr}")
    return time.monotonic() - t0


def timed_skopeo(*args):
    t0 = time.monotonic()
    skopeo(*args, check=True)
    return time.monotonic() - t0


def blob_bytes(pkg):
    root = os.path.join(pkg, "blobs", "sha256")
    return sum(os.path.getsize(os.path.join(root, n)) for n in os.listdir(root))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pack", required=True)
    ap.add_argument("--link", required=True)
    ap.add_argument("--app", required=True)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="oci-bench-")
    try:
        subprocess.run([a.pack, a.app, "-o", f"{tmp}/plain", "-n", "example"], check=True,
                       capture_output=True)
        shutil.copytree(f"{tmp}/plain", f"{tmp}/linked")
        subprocess.run([a.link, f"{tmp}/linked/example.cudaqpkg", "--arch",
                        "sm_80,sm_86,sm_89,sm_90", "--no-cache"], check=True, capture_output=True)
        with Registry(tmp=f"{tmp}/registry") as reg:
            print(f"{'package':<22} {'bytes':>9} {'tool':<8} {'push ms':>8} {'again ms':>8} "
                  f"{'pull ms':>8}")
            for label, pkg in (("example", f"{tmp}/plain/example.cudaqpkg"),
                               ("example, 4 archs", f"{tmp}/linked/example.cudaqpkg")):
                rows = {"ours": ([], [], []), "skopeo": ([], [], [])}
                for i in range(a.runs):
                    ref = f"{reg.url}/{label.split(',')[0]}{i}-{len(label)}"
                    ours, theirs = rows["ours"], rows["skopeo"]
                    ours[0].append(timed([a.link, pkg, "--push", f"oci://{ref}o:1"]))
                    ours[1].append(timed([a.link, pkg, "--push", f"oci://{ref}o:1"]))
                    ours[2].append(timed([a.pack, "--pull", f"oci://{ref}o:1", "-o",
                                          f"{tmp}/pull-o{len(label)}-{i}"]))
                    theirs[0].append(timed_skopeo("copy", "oci:" + pkg, f"docker://{ref}s:1"))
                    theirs[1].append(timed_skopeo("copy", "oci:" + pkg, f"docker://{ref}s:1"))
                    theirs[2].append(timed_skopeo("copy", f"docker://{ref}s:1",
                                                  f"oci:{tmp}/pull-s{len(label)}-{i}"))
                for tool, (push, again, pull) in rows.items():
                    print(f"{label:<22} {blob_bytes(pkg):>9} {tool:<8} "
                          f"{statistics.median(push) * 1000:>8.0f} "
                          f"{statistics.median(again) * 1000:>8.0f} "
                          f"{statistics.median(pull) * 1000:>8.0f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
