"""Puts the native runtime of a cudaq-rt build tree into the Python package, laid out as an
install prefix's lib/ (so that the runtime finds its bridges and shipped units as it does there):

    cudaq_rt/lib/libcudaq_rt.so.0
    cudaq_rt/lib/cudaq-rt/bridges/libcudaq_rt_bridge_{loopback,udp}.so
    cudaq_rt/lib/cudaq-rt/units/          the dispatchers' units compiled at build time
    cudaq_rt/lib/lib*-<hash>.so.*         the shared libraries they need that a machine with
                                          only glibc, libstdc++ and a CUDA driver may lack
    cudaq_rt/_fastcall.abi3.so            Server.call as one C function (Python 3.11+), where
                                          the build tree has it

A carried library is renamed with a hash of its bytes and its soname set to that name, and every
carried file that needs it is told the new name (patchelf), so that it never stands in for a
library of the same soname that the process loads itself (Python's own libcrypto, say). Each
carried file finds the others through RUNPATH $ORIGIN. NVRTC stays outside (110 MB): the runtime
finds it in NVIDIA's nvidia-cuda-nvrtc wheel (RUNPATH $ORIGIN/../../nvidia/cu13/lib), or the
package loads it from the CUDA Toolkit first (cudaq_rt/_library.py). Debug info is stripped."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

SONAME = "libcudaq_rt.so.0"
FASTCALL = "_fastcall.abi3.so"  # python/native/fastcall.c, built by python/CMakeLists.txt
BRIDGES = ("loopback", "udp")  # the bridges an install carries (bridges/CMakeLists.txt)
# What every machine that runs the wheel has, or must provide itself: glibc, the C++ runtime, the
# CUDA driver, NVRTC.
SYSTEM = re.compile(r"^(ld-linux.*|linux-vdso.*|libc|libm|libdl|libpthread|librt|libutil|"
                    r"libresolv|libstdc\+\+|libgcc_s|libcuda|libnvrtc)\.so")


def find_build_tree(python_dir: Path) -> Path | None:
    """$CUDAQ_RT_BUILD_DIR, else the checkout's build/ (the default preset), when it holds the
    runtime."""
    named = os.environ.get("CUDAQ_RT_BUILD_DIR")
    tree = Path(named) if named else python_dir.parent / "build"
    if (tree / "lib" / SONAME).is_file():
        return tree.resolve()
    if named:
        raise SystemExit(f"CUDAQ_RT_BUILD_DIR={named}: no lib/{SONAME} there (build it first)")
    return None


def _run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def _needed(elf: Path) -> dict[str, Path]:
    """The shared libraries `elf` names (DT_NEEDED), by soname, with the files the loader
    resolves them to here."""
    resolved: dict[str, Path] = {}
    for line in _run("ldd", str(elf)).splitlines():
        m = re.match(r"\s*(\S+) => (/\S+)", line)
        if m:
            resolved[m.group(1)] = Path(m.group(2))
        elif "not found" in line:
            raise SystemExit(f"{elf}: {line.strip()} (install it, or build where it is found)")
    needed = _run("patchelf", "--print-needed", str(elf)).split()
    return {n: resolved.get(n, Path(n)) for n in needed}


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    _run("strip", "--strip-debug", "-o", str(dst), str(src))
    dst.chmod(0o755)


def bundle(build_tree: Path, lib: Path) -> None:
    if lib.exists():
        shutil.rmtree(lib)
    runtime = lib / SONAME
    _copy((build_tree / "lib" / SONAME).resolve(), runtime)
    ours = [runtime]
    for name in BRIDGES:
        src = build_tree / "lib" / "cudaq-rt" / "bridges" / f"libcudaq_rt_bridge_{name}.so"
        dst = lib / "cudaq-rt" / "bridges" / src.name
        _copy(src, dst)
        ours.append(dst)
    units = build_tree / "lib" / "cudaq-rt" / "units"
    if units.is_dir():
        shutil.copytree(units, lib / "cudaq-rt" / "units")
    # cudaq_rt._fastcall, where the build made it, into the package itself: it needs only libc.
    fastcall = build_tree / "lib" / "cudaq-rt" / "python" / "cudaq_rt" / FASTCALL
    if fastcall.is_file():
        _copy(fastcall, lib.parent / FASTCALL)

    # The closure of what they need, outside SYSTEM, each carried once under a hashed name.
    carried: dict[str, Path] = {}  # soname -> the carried file
    pending = list(ours)
    while pending:
        elf = pending.pop()
        for soname, path in _needed(elf).items():
            if SYSTEM.match(soname) or soname in carried or soname == SONAME:
                continue
            digest = hashlib.sha256(path.read_bytes()).hexdigest()[:8]
            stem, _, version = soname.partition(".so")
            dst = lib / f"{stem}-{digest}.so{version}"
            _copy(path, dst)
            carried[soname] = dst
            pending.append(dst)
    for elf in ours + list(carried.values()):
        for soname, path in _needed(elf).items():
            if soname in carried:
                _run("patchelf", "--replace-needed", soname, carried[soname].name, str(elf))
        if elf in carried.values():
            _run("patchelf", "--set-soname", elf.name, str(elf))
        rpath = "$ORIGIN"
        if elf == runtime:
            rpath += ":$ORIGIN/../../nvidia/cu13/lib"
        elif elf.parent != lib:
            rpath = os.path.relpath(lib, elf.parent).replace(os.sep, "/")
            rpath = f"$ORIGIN/{rpath}"
        _run("patchelf", "--set-rpath", rpath, str(elf))
