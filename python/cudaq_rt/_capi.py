"""The C API's declarations (runtime/include/cudaq_rt/cudaq_rt.h) for ctypes, and the one place
its return codes become exceptions."""
from __future__ import annotations

import ctypes
from ctypes import (POINTER, Structure, c_char_p, c_double, c_int, c_int32, c_size_t, c_uint,
                    c_uint32, c_uint64, c_ulonglong, c_void_p)
from typing import Any, Callable

from . import _library
from .errors import raise_for_code

OK = 0


class Config(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("device", c_int),
        ("bridge", c_char_p),
        ("bridge_config", c_char_p),
        ("dispatcher", c_char_p),
        ("grid_blocks", c_uint),
        ("grid_threads", c_uint),
        ("allow_link", c_int),
        ("use_cache", c_int),
        ("cache_dir", c_char_p),
        ("link_options", POINTER(c_char_p)),
        ("num_link_options", c_size_t),
        ("stop_timeout_s", c_double),
        ("trust", c_char_p),
        ("nvjitlink", c_char_p),
    ]


class DispatchStats(Structure):
    _fields_ = [("requests", c_ulonglong), ("ok", c_ulonglong), ("handler_errors", c_ulonglong),
                ("protocol_errors", c_ulonglong)]


class ReloadInfo(Structure):
    _fields_ = [("swapped", c_int), ("stage_ms", c_double), ("hold_ms", c_double),
                ("swap_ms", c_double), ("launch_ms", c_double)]


class BenchReport(Structure):
    _fields_ = [("struct_size", c_size_t), ("requests", c_uint64), ("wrong", c_uint64),
                ("seconds", c_double), ("requests_per_s", c_double), ("min_us", c_double),
                ("mean_us", c_double), ("p50_us", c_double), ("p90_us", c_double),
                ("p99_us", c_double), ("p999_us", c_double), ("max_us", c_double)]


_P = c_void_p
_PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "cudaq_rt_config_init": (None, [POINTER(Config)]),
    "cudaq_rt_last_error": (c_char_p, []),
    "cudaq_rt_open_package": (c_int, [c_char_p, POINTER(_P)]),
    "cudaq_rt_open_self": (c_int, [POINTER(_P)]),
    "cudaq_rt_code_destroy": (None, [_P]),
    "cudaq_rt_code_handler": (c_char_p, [_P, c_size_t]),
    "cudaq_rt_code_check_trust": (c_int, [_P, c_char_p]),
    "cudaq_rt_find_dispatch_kernel": (c_int, [_P, c_char_p]),
    "cudaq_rt_server_create": (c_int, [_P, POINTER(Config), POINTER(_P)]),
    "cudaq_rt_server_configure": (c_int, [_P, POINTER(Config)]),
    "cudaq_rt_server_destroy": (None, [_P]),
    "cudaq_rt_load": (c_int, [_P]),
    "cudaq_rt_lookup_handler": (c_int, [_P, c_char_p, POINTER(c_uint64)]),
    "cudaq_rt_set_function": (c_int, [_P, c_uint32, c_uint64]),
    "cudaq_rt_clear_functions": (c_int, [_P]),
    "cudaq_rt_set_global": (c_int, [_P, c_char_p, c_void_p, c_size_t]),
    "cudaq_rt_start": (c_int, [_P]),
    "cudaq_rt_stop": (c_int, [_P]),
    "cudaq_rt_check": (c_int, [_P]),
    "cudaq_rt_reload": (c_int, [_P, _P, POINTER(ReloadInfo)]),
    "cudaq_rt_slot_size": (c_uint32, [_P]),
    "cudaq_rt_get_stats": (c_int, [_P, POINTER(DispatchStats)]),
    "cudaq_rt_send": (c_int, [_P, c_void_p, c_size_t, POINTER(c_int)]),
    "cudaq_rt_receive": (c_int, [_P, c_void_p, c_size_t, POINTER(c_size_t)]),
    "cudaq_rt_call": (c_int, [_P, c_uint32, c_void_p, c_uint32, c_void_p, c_uint32,
                              POINTER(c_uint32), POINTER(c_int32), c_double]),
    "cudaq_rt_call_batch": (c_int, [_P, c_uint32, c_void_p, c_size_t, c_void_p, c_size_t,
                                    c_void_p, c_size_t, c_void_p, c_void_p, c_uint32, c_double]),
    "cudaq_rt_bench": (c_int, [_P, c_uint32, c_void_p, c_uint32, c_uint64, c_uint32, c_uint64,
                               c_int, c_double, POINTER(BenchReport)]),
}


class Api:
    """The C API's functions with their prototypes set, bound once per process."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self.library = library
        for name, (restype, argtypes) in _PROTOTYPES.items():
            try:
                fn = getattr(library, name)
            except AttributeError:
                raise _library.LibraryNotFoundError(
                    f"{_library.library_path()}: has no {name}: it is another version of "
                    "libcudaq_rt.so.0 than this package's") from None
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name[len("cudaq_rt_"):], fn)
        # cudaq_rt_call once more, without argtypes: ctypes then checks and converts nothing, and
        # the caller passes ctypes objects it made once (c_void_p, c_uint32, c_double; ints only
        # where a C int holds them). Half the cost of a call with argtypes (1.17 to 0.53 us).
        self.call_prepared = ctypes.CFUNCTYPE(c_int)(("cudaq_rt_call", library))

    def error_text(self) -> str:
        raw: bytes | None = self.library.cudaq_rt_last_error()
        return raw.decode("utf-8", "replace") if raw else ""

    def ok(self, code: int) -> None:
        """Raises the exception of a C API return code, with the calling thread's last error.
        (Not `check`: that is cudaq_rt_check's name here.)"""
        if code != OK:
            raise_for_code(code, self.error_text())

    def ok_with(self, code: int, message: str) -> None:
        """As ok, with a message read before the C calls that came since."""
        if code != OK:
            raise_for_code(code, message)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        raise AttributeError(name)  # for the type checker: every prototype is set in __init__


_api: Api | None = None


def api() -> Api:
    """The bound C API (the library is found and opened on first use)."""
    global _api
    if _api is None:
        _api = Api(_library.load())
    return _api
