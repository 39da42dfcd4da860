"""Device code to serve: a package (a directory, or a registry reference), or this program's own."""
from __future__ import annotations

import ctypes
import os
import weakref
from types import TracebackType
from typing import Sequence, Union

from . import _capi
from .errors import StateError

PathLike = Union[str, "os.PathLike[str]"]
# Trusted public keys: PEM files, or directories of *.pem and *.pub.
Trust = Union[PathLike, Sequence[PathLike], None]


def trust_list(trust: Trust) -> str | None:
    """The C API's ':'-separated list of key paths; None leaves CUDAQ_RT_TRUST in charge."""
    if trust is None:
        return None
    if isinstance(trust, (str, os.PathLike)):
        return os.fspath(trust)
    return ":".join(os.fspath(t) for t in trust)


class Code:
    """Device code: every handler it exports and the package it came from, read and verified.
    Made by :func:`open_package` or :func:`open_self`; freed by :meth:`close`, at the end of a
    ``with`` block, or when the last reference goes (a :class:`Server` keeps one)."""

    def __init__(self, pointer: int, label: str, trust: str | None) -> None:
        self._pointer = pointer
        self.label = label
        """The package path or reference as given, or "this program (PATH)"."""
        self.trust = trust
        """The keys it was checked against (``:``-separated), or None."""
        api = _capi.api()
        names: list[str] = []
        while (raw := api.code_handler(pointer, len(names))) is not None:
            names.append(raw.decode())
        self.handlers: tuple[str, ...] = tuple(names)
        """The handler exports and, after them, the aliases' wire names."""
        self._finalizer = weakref.finalize(self, api.code_destroy, pointer)

    @property
    def pointer(self) -> int:
        """The ``cudaq_rt_code *`` (for a C extension that drives the C API itself)."""
        if not self._finalizer.alive:
            raise StateError(f"'{self.label}': the code is closed")
        return self._pointer

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` freed it."""
        return not self._finalizer.alive

    def has_dispatch_kernel(self, name: str) -> bool:
        """Whether the code exports the dispatch kernel `name` (CUDAQ_RT_EXPORT_DISPATCH_KERNEL)."""
        return bool(_capi.api().find_dispatch_kernel(self.pointer, name.encode()) == _capi.OK)

    def close(self) -> None:
        """Frees the code. Servers made from it keep it alive until they are closed."""
        self._finalizer()

    def __enter__(self) -> "Code":
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self.handlers)} handlers"
        return f"<cudaq_rt.Code '{self.label}' ({state})>"


def open_package(path: PathLike, *, trust: Trust = None) -> Code:
    """Opens a package directory (``NAME.cudaqpkg``) or a registry reference
    (``oci://HOST[:PORT]/REPO[:TAG]``, pulled into the store under the link cache's directory),
    reading every blob and checking it against its digest. With `trust` (key files or
    directories; None: ``$CUDAQ_RT_TRUST``, if set) the package must carry a signature by one of
    them: an unsigned, tampered or wrongly signed one raises :class:`RefusedError` with the C
    API's reason. No GPU work."""
    api = _capi.api()
    out = ctypes.c_void_p()
    api.ok(api.open_package(os.fsencode(path), ctypes.byref(out)))
    assert out.value is not None
    keys = trust_list(trust)
    rc = api.code_check_trust(out.value, keys.encode() if keys is not None else None)
    if rc != _capi.OK:
        message = api.error_text()
        api.code_destroy(out.value)
        api.ok_with(rc, message)
    return Code(out.value, os.fspath(path), keys)


def open_self() -> Code:
    """Opens this process's own device code: the ``__nv_relfatbin`` of the executable and of each
    loaded shared object that exports handlers (built with ``-rdc`` and LTO-IR, as for
    cudaq-rt-pack). A file replaced on disk since the process started is refused. No GPU work."""
    api = _capi.api()
    out = ctypes.c_void_p()
    api.ok(api.open_self(ctypes.byref(out)))
    assert out.value is not None
    return Code(out.value, "this program", None)
