"""The exceptions of cudaq_rt: one per C API return code (cudaq_rt/cudaq_rt.h), each carrying the
C API's one-line message and code, and the two a handler's answer can raise."""
from __future__ import annotations

from cudaq_rt_client.wire import status_name

# The C API's return codes.
E_ARGUMENT = 1
E_STATE = 2
E_NOT_FOUND = 3
E_REFUSED = 4
E_NO_GPU = 5
E_TIMEOUT = 6
E_FAILED = 7


class Error(Exception):
    """A C API call failed. ``code`` is its return code (CUDAQ_RT_E_*), ``message`` the C API's
    one-line error (cudaq_rt_last_error), which is also ``str()`` of the exception."""

    code: int = E_FAILED

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class ArgumentError(Error, ValueError):
    """A bad argument or configuration value (CUDAQ_RT_E_ARGUMENT)."""

    code = E_ARGUMENT


class StateError(Error):
    """Not now: a lookup before a load, a call while stopped, a load while running
    (CUDAQ_RT_E_STATE)."""

    code = E_STATE


class NotFoundError(Error, LookupError):
    """No such package, handler, dispatch kernel or global (CUDAQ_RT_E_NOT_FOUND)."""

    code = E_NOT_FOUND


class RefusedError(Error):
    """A guard said no, before the GPU was touched: an untrusted or unsigned package, a function
    table entry from elsewhere, a reload the server cannot take (CUDAQ_RT_E_REFUSED)."""

    code = E_REFUSED


class NoGpuError(Error):
    """No CUDA driver or no device on this machine (CUDAQ_RT_E_NO_GPU)."""

    code = E_NO_GPU


class CallTimeoutError(Error, TimeoutError):
    """An answer did not come in time; the kernel still runs (CUDAQ_RT_E_TIMEOUT)."""

    code = E_TIMEOUT


class FailedError(Error):
    """Anything else: a link, a load, a kernel that faulted (CUDAQ_RT_E_FAILED)."""

    code = E_FAILED


_BY_CODE: dict[int, type[Error]] = {
    cls.code: cls
    for cls in (ArgumentError, StateError, NotFoundError, RefusedError, NoGpuError,
                CallTimeoutError, FailedError)
}


def raise_for_code(code: int, message: str) -> None:
    """Raises the exception of a C API return code other than 0."""
    cls = _BY_CODE.get(code)
    if cls is None:
        raise Error(f"{message} (C API return code {code})", code)
    raise cls(message)


class HandlerError(Exception):
    """A handler answered with a status other than 0. ``status`` is its status (> 0: the
    handler's own; < 0: a protocol error, see :class:`ProtocolError`), ``handler`` what was
    called, ``result`` the bytes it answered with."""

    def __init__(self, handler: str, status: int, result: bytes = b"") -> None:
        super().__init__(f"{handler}: {status_name(status)} (status {status})")
        self.handler = handler
        self.status = status
        self.result = result


class ProtocolError(HandlerError):
    """The dispatch kernel refused the request (status < 0): an unknown function, a payload or
    result too large, a truncated frame, a handler that faulted (libdispatch's wire.h)."""
