#!/usr/bin/python3
"""Fetches the nvJitLink wheels pinned in nvjitlink-wheels.txt into DIR and unpacks each into
DIR/<major>.<minor> (DIR/13.5/nvidia/cu13/..., DIR/12.9/nvidia/nvjitlink/...), for
test_nvjitlink_versions.py (ctest: the fixture setup.nvjitlink_wheels, DIR in the build tree).

Usage: fetch_nvjitlink_wheels.py DIR

A pin already unpacked (its dist-info directory is there) is neither fetched nor unpacked again;
the wheels stay in DIR, where pip finds them (--find-links) without an index when an unpacked tree
is removed. pip checks each wheel against its pinned hash (--require-hashes). Prints one line; exits 1, with pip's last lines,
when the wheels cannot be fetched (offline, no index reachable, a hash that does not match).
"""
import os
import re
import shutil
import subprocess
import sys
import zipfile

REQUIREMENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nvjitlink-wheels.txt")


def pins():
    """(distribution, version) of every pin, in the file's order."""
    with open(REQUIREMENTS) as f:
        return re.findall(r"^([A-Za-z0-9_.-]+)==([0-9][0-9.]*)", f.read(), re.M)


def release(version):
    return ".".join(version.split(".")[:2])


def wheel_stem(name, version):
    """The start of the pin's wheel file name and of its dist-info directory (PEP 427)."""
    return f"{re.sub(r'[-_.]+', '_', name)}-{version}"


def unpacked(out, name, version):
    return os.path.isdir(os.path.join(out, release(version), wheel_stem(name, version) + ".dist-info"))


def download(out):
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--require-hashes", "--disable-pip-version-check", "--progress-bar", "off",
           "--find-links", out, "-r", REQUIREMENTS, "-d", out]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        tail = "\n".join(r.stdout.strip().splitlines()[-8:])
        sys.exit(f"fetch_nvjitlink_wheels: cannot download the wheels of {REQUIREMENTS} "
                 f"(offline, or no package index reachable?): {' '.join(cmd)} exited "
                 f"{r.returncode}:\n{tail}")


def unpack(out, name, version):
    """Unpacks the pin's wheel into out/<major>.<minor>: into a temporary directory first, renamed
    when complete, so that an interrupted run leaves nothing that counts as unpacked."""
    stem = wheel_stem(name, version)
    wheels = [f for f in os.listdir(out) if f.startswith(stem + "-") and f.endswith(".whl")]
    if len(wheels) != 1:
        sys.exit(f"fetch_nvjitlink_wheels: {out}: expected one {stem}-*.whl after pip, "
                 f"found {wheels}")
    target = os.path.join(out, release(version))
    partial = target + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    with zipfile.ZipFile(os.path.join(out, wheels[0])) as z:
        z.extractall(partial)
    shutil.rmtree(target, ignore_errors=True)  # another version of the same release
    os.rename(partial, target)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: fetch_nvjitlink_wheels.py DIR")
    out = os.path.abspath(sys.argv[1])
    os.makedirs(out, exist_ok=True)
    wanted = pins()
    if not wanted:
        sys.exit(f"fetch_nvjitlink_wheels: {REQUIREMENTS} pins nothing")
    missing = [(n, v) for n, v in wanted if not unpacked(out, n, v)]
    if missing:
        download(out)
        for name, version in missing:
            unpack(out, name, version)
    listing = ", ".join(f"{release(v)} ({n} {v})" for n, v in wanted)
    print(f"nvJitLink wheels in {out}: {listing}: "
          f"{'fetched and unpacked' if missing else 'already there'}")


if __name__ == "__main__":
    main()
