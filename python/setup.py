"""Builds the cudaq-rt distribution. From a checkout whose build tree exists (``../build``, or
``$CUDAQ_RT_BUILD_DIR``), the package carries the native runtime (bundle_native.py): the wheel is
then platform-specific and needs nothing but glibc, libstdc++, the CUDA driver and NVRTC 13. Without
a build tree it is pure Python and finds an installed runtime (cudaq_rt/_library.py)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
try:  # setuptools' own since 70.1; before it, the wheel package's
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bundle_native import bundle, find_build_tree  # noqa: E402

BUILD_TREE = find_build_tree(HERE)


class BuildWithNative(build_py):
    """build_py, then the runtime and its bridges, units and libraries into cudaq_rt/lib/."""

    def run(self) -> None:
        super().run()
        if BUILD_TREE is not None:
            bundle(BUILD_TREE, Path(self.build_lib) / "cudaq_rt" / "lib")


class PlatformWheel(bdist_wheel):
    """A wheel for this platform, any Python 3, when it carries the runtime: the runtime is driven
    through ctypes, and the one extension module it may carry (cudaq_rt._fastcall, stable ABI of
    3.11) is loaded only where the Python can, else calls go through ctypes."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = BUILD_TREE is None

    def get_tag(self) -> tuple[str, str, str]:
        python, abi, platform = super().get_tag()
        return ("py3", "none", platform) if BUILD_TREE is not None else (python, abi, platform)


setup(cmdclass={"build_py": BuildWithNative, "bdist_wheel": PlatformWheel})
