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
    and ``size`` are its bytes; ``shape`` and ``itemsize`` what the exporter says they are.

    A writable buffer is held through a memoryview and a ctypes view of it (about 0.2 us); a
    read-only one (bytes slices, read-only arrays) through the C API's PyObject_GetBuffer, called
    by ctypes (about 1 us): ctypes cannot point at read-only memory otherwise."""

    __slots__ = ("_view", "_held", "_memory", "_anchor", "address", "size", "itemsize", "shape")

    def __init__(self, obj: object, what: str, writable: bool = False) -> None:
        self._held = False
        self._anchor: ctypes.c_char | None = None
        try:
            memory = memoryview(obj)  # type: ignore[arg-type]
        except TypeError:
            raise ArgumentError(
                f"{what}: {type(obj).__name__} has no buffer (bytes, bytearray, memoryview, "
                "array.array and numpy arrays do)") from None
        if not memory.c_contiguous or (writable and memory.readonly):
            need = "a writable, contiguous buffer" if writable else "a contiguous buffer"
            why = "read-only" if memory.c_contiguous else "not C-contiguous"
            raise ArgumentError(
                f"{what}: {type(obj).__name__} is not {need} ({why}); bytes, bytearray, "
                "memoryview and C-contiguous numpy arrays are")
        self._memory = memory
        self.size: int = memory.nbytes
        self.itemsize: int = memory.itemsize
        self.shape: tuple[int, ...] = memory.shape or ()
        self.address: int = 0
        if self.size == 0:
            return
        if not memory.readonly:
            self._anchor = ctypes.c_char.from_buffer(memory)
            self.address = ctypes.addressof(self._anchor)
            return
        self._view = _PyBuffer()
        if _get_buffer(memory, ctypes.byref(self._view), _PyBUF_SIMPLE) != 0:
            raise ArgumentError(f"{what}: its buffer cannot be read")
        self._held = True
        self.address = self._view.buf or 0

    def release(self) -> None:
        if self._held:
            self._held = False
            _release_buffer(ctypes.byref(self._view))
        if self._anchor is not None:
            self._anchor = None
            self._memory.release()

    def __enter__(self) -> "Pinned":
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()
