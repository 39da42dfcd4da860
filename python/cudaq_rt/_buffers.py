"""Reading and writing Python buffers in place: the address of any object with the buffer
protocol (bytes, bytearray, memoryview, array.array, numpy), held for the length of one C call,
without a copy. A buffer that is not contiguous cannot be handed to C in place and is refused;
``bytes(x)`` or ``numpy.ascontiguousarray(x)`` makes one that can."""
from __future__ import annotations

import ctypes
from ctypes import POINTER, Structure, c_char_p, c_int, c_ssize_t, c_void_p, py_object
from types import TracebackType
from typing import Any, Union

from .errors import ArgumentError

# What the package accepts wherever it takes bytes: anything with the buffer protocol.
Buffer = Union[bytes, bytearray, memoryview, Any]

_PyBUF_SIMPLE = 0
_PyBUF_WRITABLE = 0x0001
_PyBUF_FORMAT = 0x0004
_PyBUF_ND = 0x0008
_PyBUF_C_CONTIGUOUS = 0x0020 | _PyBUF_ND | 0x0010  # PyBUF_C_CONTIGUOUS includes STRIDES


class _PyBuffer(Structure):
    _fields_ = [("buf", c_void_p), ("obj", ctypes.py_object), ("len", c_ssize_t),
                ("itemsize", c_ssize_t), ("readonly", c_int), ("ndim", c_int),
                ("format", c_char_p), ("shape", POINTER(c_ssize_t)),
                ("strides", POINTER(c_ssize_t)), ("suboffsets", POINTER(c_ssize_t)),
                ("internal", c_void_p)]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [py_object, POINTER(_PyBuffer), c_int]
_get_buffer.restype = c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [POINTER(_PyBuffer)]
_release_buffer.restype = None


class Pinned:
    """An object's buffer, held (its memory cannot move or be freed) until released. ``address``
    and ``size`` are its bytes; ``shape`` and ``itemsize`` what the exporter says they are."""

    __slots__ = ("_view", "_held", "address", "size", "itemsize", "shape")

    def __init__(self, obj: object, what: str, writable: bool = False) -> None:
        self._held = False
        self._view = _PyBuffer()
        flags = _PyBUF_C_CONTIGUOUS | (_PyBUF_WRITABLE if writable else 0)
        try:
            if _get_buffer(obj, ctypes.byref(self._view), flags) != 0:
                raise BufferError(what)
        except (BufferError, ValueError) as e:
            need = "a writable, contiguous buffer" if writable else "a contiguous buffer"
            raise ArgumentError(
                f"{what}: {type(obj).__name__} is not {need} ({e}); bytes, bytearray, "
                "memoryview and C-contiguous numpy arrays are") from None
        except TypeError:
            raise ArgumentError(
                f"{what}: {type(obj).__name__} has no buffer (bytes, bytearray, memoryview, "
                "array.array and numpy arrays do)") from None
        self._held = True
        self.address: int = self._view.buf or 0
        self.size: int = self._view.len
        self.itemsize: int = self._view.itemsize
        self.shape: tuple[int, ...] = tuple(self._view.shape[i] for i in range(self._view.ndim))

    def release(self) -> None:
        if self._held:
            self._held = False
            _release_buffer(ctypes.byref(self._view))

    def __enter__(self) -> "Pinned":
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()
