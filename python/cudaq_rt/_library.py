"""Finding and opening libcudaq_rt.so.0, the C API this package drives (cudaq_rt/cudaq_rt.h).

Where the library is looked for, first match wins:

1. ``$CUDAQ_RT_PREFIX``, when set: an install prefix (``cmake --install``), its ``lib/``,
   ``lib64/`` or multiarch ``lib/<triplet>/``. Nothing else is tried: a prefix named and not
   found is an error, never a silent fallback to another build.
2. The copy inside this package (``cudaq_rt/lib/``): a wheel, or ``pip install ./python`` from a
   checkout that was built. Its bridges and shipped units sit beside it as in an install prefix.
3. The install prefix this package was installed into (``<prefix>/lib/cudaq-rt/python``).
4. The build tree of the checkout this package is imported from (``python/`` beside ``build/``).
5. The dynamic loader's own search (``LD_LIBRARY_PATH``, ``ldconfig``).

The runtime then finds its bridges and shipped units relative to the library file itself, as the
tools do. Its one shared dependency outside the C library is NVRTC 13: from the
``nvidia-cuda-nvrtc`` wheel when installed, else from the CUDA Toolkit (``$CUDA_HOME`` or
``/usr/local/cuda``), else wherever the loader finds it.
"""
from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import sys
import threading
from pathlib import Path
from types import ModuleType

SONAME = "libcudaq_rt.so.0"
PREFIX_VARIABLE = "CUDAQ_RT_PREFIX"

_HERE = Path(__file__).resolve().parent
_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_library_path: str | None = None


class LibraryNotFoundError(ImportError):
    """libcudaq_rt.so.0 is nowhere this package looks (see :func:`library_path`)."""


def _in_prefix(prefix: Path) -> list[Path]:
    libdirs = [prefix / "lib", prefix / "lib64"]
    libdirs += sorted(p for p in (prefix / "lib").glob("*-linux-gnu") if p.is_dir())
    return [d / SONAME for d in libdirs]


def _site_packages_roots() -> list[Path]:
    roots = [_HERE.parent]
    roots += [Path(p) for p in sys.path if p and Path(p).name in ("site-packages", "dist-packages")]
    return roots


def nvidia_wheel_library(name: str) -> Path | None:
    """A CUDA 13 library as NVIDIA's PyPI wheels install it (``nvidia/cu13/lib/NAME``)."""
    for root in _site_packages_roots():
        candidate = root / "nvidia" / "cu13" / "lib" / name
        if candidate.is_file():
            return candidate
    return None


def _candidates() -> tuple[list[Path], str]:
    prefix = os.environ.get(PREFIX_VARIABLE)
    if prefix:
        return _in_prefix(Path(prefix)), f"${PREFIX_VARIABLE}={prefix}"
    found = [_HERE / "lib" / SONAME]
    # <prefix>/lib/cudaq-rt/python/cudaq_rt: the prefix is four levels up.
    if _HERE.parent.name == "python" and _HERE.parent.parent.name == "cudaq-rt":
        found += _in_prefix(_HERE.parents[3])
    # <checkout>/python/cudaq_rt with <checkout>/build from the default preset.
    if (_HERE.parents[1] / "CMakePresets.json").is_file():
        found.append(_HERE.parents[1] / "build" / "lib" / SONAME)
    return found, ""


def _preload_nvrtc() -> None:
    """Loads NVRTC 13 by path where the loader would not find it, so that the runtime's
    dependency on it (by soname) is met."""
    wheel = nvidia_wheel_library("libnvrtc.so.13")
    toolkit = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda")
    for candidate in (wheel, toolkit / "lib64" / "libnvrtc.so.13",
                      toolkit / "lib" / "libnvrtc.so.13"):
        if candidate is not None and candidate.is_file():
            try:
                ctypes.CDLL(str(candidate))
                return
            except OSError:
                continue


def load() -> ctypes.CDLL:
    """The C API's library, opened once per process."""
    global _library, _library_path
    with _lock:
        if _library is not None:
            return _library
        candidates, named_by = _candidates()
        chosen = next((c for c in candidates if c.is_file()), None)
        if chosen is None and named_by:
            looked = ", ".join(str(c) for c in candidates)
            raise LibraryNotFoundError(
                f"{named_by}: no {SONAME} there (looked in {looked}); set it to the prefix "
                "cudaq-rt was installed to (cmake --install)")
        _preload_nvrtc()
        target = str(chosen) if chosen is not None else SONAME
        try:
            library = ctypes.CDLL(target)
        except OSError as e:
            looked = ", ".join(str(c) for c in candidates)
            raise LibraryNotFoundError(
                f"cannot load {SONAME}: {e} (looked in {looked}, then the loader's path): "
                f"install the cudaq-rt wheel, build the checkout (scripts/run-example.sh) before "
                f"`pip install ./python`, or set ${PREFIX_VARIABLE} to an install prefix") from None
        _library, _library_path = library, str(chosen) if chosen is not None else _mapped(SONAME)
        return library


def _mapped(name: str) -> str:
    """The path the loader opened `name` from, as /proc/self/maps shows it."""
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            path = line.split(maxsplit=5)[-1].strip()
            if path.startswith("/") and Path(path).name.startswith(name):
                return path
    return name


FASTCALL = "_fastcall.abi3.so"
FASTCALL_VARIABLE = "CUDAQ_RT_FASTCALL"
_fastcall: ModuleType | None = None
_fastcall_tried = False


def fastcall_candidates() -> list[Path]:
    """Where cudaq_rt._fastcall (python/native/fastcall.c) is looked for: in this package (a
    wheel, an install prefix), in ``$CUDAQ_RT_PREFIX``'s package when that is set, then beside
    the runtime library loaded, as the build tree has it (``lib/cudaq-rt/python/cudaq_rt/``)."""
    found = [_HERE / FASTCALL]
    prefix = os.environ.get(PREFIX_VARIABLE)
    if prefix:
        found.append(Path(prefix) / "lib" / "cudaq-rt" / "python" / "cudaq_rt" / FASTCALL)
    found.append(Path(library_path()).parent / "cudaq-rt" / "python" / "cudaq_rt" / FASTCALL)
    return found


def fastcall() -> ModuleType | None:
    """cudaq_rt._fastcall, which makes Server.call one C function, or None: not built (no Python
    headers where the runtime was built), not loadable (Python before 3.11), or turned off with
    ``$CUDAQ_RT_FASTCALL=0``. Calls then go through ctypes, with the same results."""
    global _fastcall, _fastcall_tried
    with _lock:
        if _fastcall_tried:
            return _fastcall
        _fastcall_tried = True
        if os.environ.get(FASTCALL_VARIABLE, "1") == "0" or sys.version_info < (3, 11):
            return None
    name = f"{__package__}._fastcall"
    for candidate in fastcall_candidates():
        if not candidate.is_file():
            continue
        spec = importlib.util.spec_from_file_location(
            name, candidate, loader=importlib.machinery.ExtensionFileLoader(name, str(candidate)))
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except ImportError:
            continue
        with _lock:
            _fastcall = module
        return module
    return None


def library_path() -> str:
    """The file the C API was loaded from (loading it if not yet)."""
    load()
    assert _library_path is not None
    return _library_path
