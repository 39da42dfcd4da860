"""A dispatch kernel on a GPU with its bridge and function table: the C API's cudaq_rt_server."""
from __future__ import annotations

import array
import ctypes
import functools
import os
import weakref
from types import TracebackType
from typing import TYPE_CHECKING, Any, Mapping, NoReturn, Sequence, Union, overload

from cudaq_rt_client.wire import HEADER_SIZE, function_id as _fnv1a

from . import _capi, _devices, _library
from ._buffers import Buffer, Pinned
from .code import Code, PathLike, Trust, trust_list
from .errors import ArgumentError, NotFoundError, StateError
from .results import (Answer, BatchResult, BenchReport, ReloadReport, Stats, raise_for_status)

if TYPE_CHECKING:
    import numpy.typing as npt

    from . import _fastcall

# A handler: its exported name or alias, or a function_id of the application's table.
Handler = Union[str, int]


class _FromCode:
    def __repr__(self) -> str:
        return "the code's"


FROM_CODE: Any = _FromCode()


def _head(buffer: Buffer, n: int) -> bytes:
    """The first `n` bytes of a buffer, whatever its item size."""
    return bytes(memoryview(buffer).cast("B")[:n])


def _bridge_config_text(config: str | Mapping[str, object] | None) -> str | None:
    if config is None or isinstance(config, str):
        return config
    return ",".join(f"{k}={v}" for k, v in config.items())


class _Config:
    """A cudaq_rt_config and the bytes its pointers point at, alive as long as it is."""

    def __init__(self, **options: Any) -> None:
        api = _capi.api()
        self.struct = _capi.Config()
        api.config_init(ctypes.byref(self.struct))
        self._keep: list[Any] = []
        c = self.struct
        c.device = options["device"]
        c.bridge = self._text(options["bridge"])
        c.bridge_config = self._text(_bridge_config_text(options["bridge_config"]))
        c.dispatcher = self._text(options["dispatcher"])
        grid = options["grid"]
        if grid is not None:
            c.grid_blocks, c.grid_threads = grid
        c.allow_link = 1 if options["allow_link"] else 0
        c.use_cache = 1 if options["cache"] else 0
        c.cache_dir = self._text(options["cache_dir"])
        link_options = [os.fsencode(o) for o in options["link_options"]]
        if link_options:
            arr = (ctypes.c_char_p * len(link_options))(*link_options)
            self._keep += [arr, link_options]
            c.link_options = arr
            c.num_link_options = len(link_options)
        c.stop_timeout_s = options["stop_timeout"]
        c.trust = self._text(options["trust"])
        c.nvjitlink = self._text(options["nvjitlink"])

    def _text(self, value: PathLike | None) -> bytes | None:
        if value is None:
            return None
        raw = os.fsencode(value)
        self._keep.append(raw)
        return raw


def _default_nvjitlink() -> str | None:
    """NVIDIA's nvJitLink wheel, when it is installed and nothing else is named."""
    if os.environ.get("CUDAQ_RT_NVJITLINK"):
        return None
    wheel = _library.nvidia_wheel_library("libnvJitLink.so.13")
    return str(wheel) if wheel is not None else None


def _call_general(server: "weakref.ref[Server]", handler: Handler, arg: Buffer, result: Any,
                  out: Any, timeout: float, answer: Any) -> Any:
    """Where cudaq_rt._fastcall's Server.call goes when it has no result to return (a weak
    reference: the server holds the Caller that holds this)."""
    s = server()
    if s is None:
        raise StateError("the server is closed")
    return s._call_general(handler, arg, result, out, timeout, answer)


def _destroy(handle: _devices.Handle, codes: list[Code]) -> None:
    # The code is held here until the server is gone: the C API frees servers before their code.
    if handle.pointer:
        with _devices.exclusive(handle):
            if handle.fast is not None:  # a thread holding it gets None: the general path
                handle.fast.detach()
            _capi.api().server_destroy(handle.pointer)
            handle.pointer = 0
            handle.running = False
    _devices.forget(handle)
    codes.clear()


class Server:
    """A dispatch kernel on one GPU serving `code` through a bridge.

    Creating one does no GPU work. :meth:`start` (or entering a ``with`` block) finds or links
    the cubin for the GPU, loads it and launches the kernel; :meth:`close` (or leaving the block)
    stops it and frees everything. Every argument is the C API's ``cudaq_rt_config``: `bridge` a
    bridge name or library path (None: the package's, else ``loopback``), `bridge_config` its
    ``KEY=VALUE,...`` (a string or a mapping), `dispatcher` a dispatch kernel the code exports or
    ``"builtin"`` (None: the code's one, else the unified kernel), `grid` the launch shape
    (blocks, threads; ``"warp"`` as (B, 32): B serving warps), `trust` the keys a package must be signed by (default: those it was opened
    with), `nvjitlink` the libnvJitLink a link at load uses (default: NVIDIA's wheel when
    installed, else ``$CUDAQ_RT_NVJITLINK``, else the toolkit's).

    Calls, batches and benchmarks release the GIL while they wait. One thread at a time uses a
    server (others wait for it); :meth:`stats` may be read from any thread at any time. Several
    servers may live in one process: a load, start, reload or close of one pauses the others'
    kernels between two requests, because the driver would make it wait for them."""

    def __init__(self, code: Code, *, device: int = 0, bridge: str | None = None,
                 bridge_config: str | Mapping[str, object] | None = None,
                 dispatcher: str | None = None, grid: tuple[int, int] | None = None,
                 allow_link: bool = True, cache: bool = True, cache_dir: PathLike | None = None,
                 link_options: Sequence[str] = (), stop_timeout: float = 5.0,
                 trust: Trust = FROM_CODE, nvjitlink: PathLike | None = None) -> None:
        api = _capi.api()
        config = _Config(
            device=device, bridge=bridge, bridge_config=bridge_config, dispatcher=dispatcher,
            grid=grid, allow_link=allow_link, cache=cache, cache_dir=cache_dir,
            link_options=link_options, stop_timeout=stop_timeout,
            trust=code.trust if trust is FROM_CODE else trust_list(trust),
            nvjitlink=nvjitlink if nvjitlink is not None else _default_nvjitlink())
        out = ctypes.c_void_p()
        api.ok(_create(code.pointer, ctypes.byref(config.struct), ctypes.byref(out)))
        assert out.value is not None
        self._code = code
        self._handle = _devices.Handle(out.value, code.label)
        self._codes = [code]
        self._finalizer = weakref.finalize(self, _destroy, self._handle, self._codes)
        _devices.register(self._handle)
        self._ids: dict[str, int] = {}
        # What every call passes, made once: a call's cost is mostly the foreign call itself.
        self._result_len = ctypes.c_uint32()
        self._status = ctypes.c_int32()
        self._result_len_ref = ctypes.byref(self._result_len)
        self._status_ref = ctypes.byref(self._status)
        # The ctypes path's arguments as ctypes objects (Api.call_prepared): the server, each
        # handler's function_id, the result buffer, each timeout.
        self._c_prepared = api.call_prepared
        self._c_server = ctypes.c_void_p(out.value)
        self._c_ids: dict[str, ctypes.c_uint32] = {}
        self._c_result = ctypes.c_void_p()
        self._c_timeouts: dict[float, ctypes.c_double] = {}
        self._result_view = memoryview(b"")

    # -- life -------------------------------------------------------------------------------

    @property
    def code(self) -> Code:
        """The code being served (a reload's, after :meth:`reload`)."""
        return self._code

    @property
    def pointer(self) -> int:
        """The ``cudaq_rt_server *`` (for a C extension that drives the C API itself)."""
        if not self._handle.pointer:
            raise StateError(f"'{self._code.label}': the server is closed")
        return self._handle.pointer

    @property
    def running(self) -> bool:
        """Whether the dispatch kernel was started and not stopped (see :meth:`check`)."""
        return self._handle.running

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` freed it."""
        return not self._handle.pointer

    def load(self) -> None:
        """Finds or links the cubin for the GPU, loads it, reads every handler's address and
        writes the globals set so far. Refusals (signature, arch, no GPU) come before the GPU is
        touched. :meth:`start` loads first when needed."""
        pointer = self.pointer
        with _devices.exclusive(self._handle):
            _capi.api().ok(_capi.api().load(pointer))

    def start(self) -> None:
        """Launches the dispatch kernel, loading first if needed. On an error nothing runs."""
        pointer = self.pointer
        with _devices.exclusive(self._handle):
            _capi.api().ok(_capi.api().start(pointer))
            self._handle.running = True
            # The result buffer: the view keeps it alive, the pointer is what calls pass.
            buffer = ctypes.create_string_buffer(max(self.slot_size, 1))
            self._result_view = memoryview(buffer).cast("B")
            self._c_result = ctypes.c_void_p(ctypes.addressof(buffer))
            self._set_fast(None)
            fast = _library.fastcall()
            if fast is not None:
                call = ctypes.cast(_capi.api().library.cudaq_rt_call, ctypes.c_void_p).value
                self._set_fast(fast.Caller(call, pointer, self._handle.lock,
                                           len(self._result_view), self._ids,
                                           functools.partial(_call_general, weakref.ref(self))))

    def stop(self) -> None:
        """Stops the kernel (waiting up to `stop_timeout`); an error names a hung or failed
        kernel. :meth:`start` starts it again on the same bridge instance."""
        with self._handle.lock:
            self._set_fast(None)  # a stopped server's calls take the general path, which says so
            try:
                _capi.api().ok(_capi.api().stop(self.pointer))
            finally:
                self._handle.running = False

    def _set_fast(self, caller: "_fastcall.Caller | None") -> None:
        """Under the lock: the Caller made at the last start serves no more calls (a thread that
        took it before gets None from it, and the general path), and `caller` (None: none) serves
        them from now on. While there is one, its server_call stands in this instance for
        :meth:`call`, so that a call runs no Python code of the package's unless it fails."""
        old = self._handle.fast
        if old is not None and old is not caller:
            old.detach()
        self._handle.fast = caller
        if caller is None:
            self.__dict__.pop("call", None)
        else:
            self.__dict__["call"] = caller.server_call

    def check(self) -> None:
        """Raises FailedError naming the fault when the kernel has ended by itself, StateError
        when it is not running."""
        with self._handle.lock:
            _capi.api().ok(_capi.api().check(self.pointer))

    def close(self) -> None:
        """Stops the kernel and frees the server; closing again does nothing."""
        self._finalizer()

    def __enter__(self) -> "Server":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "running" if self.running else "stopped"
        return f"<cudaq_rt.Server '{self._code.label}' ({state})>"

    # -- the function table and globals ----------------------------------------------------

    def lookup(self, name: str) -> int:
        """A handler's device address in the loaded module, by export name or alias."""
        fn = ctypes.c_uint64()
        with self._handle.lock:
            _capi.api().ok(_capi.api().lookup_handler(self.pointer, name.encode(),
                                                         ctypes.byref(fn)))
        return fn.value

    def set_function(self, function_id: Handler, handler: str | int) -> None:
        """Puts a handler (a name, or an address :meth:`lookup` returned) in the application's
        function table under `function_id` (a number, or a name whose FNV-1a is used). With any
        entry set, the kernel serves exactly those; without, every export under its own name."""
        fid = function_id if isinstance(function_id, int) else _fnv1a(function_id)
        address = self.lookup(handler) if isinstance(handler, str) else handler
        with self._handle.lock:
            _capi.api().ok(_capi.api().set_function(self.pointer, fid, address))

    def clear_functions(self) -> None:
        """Back to the default table: every export under its own name."""
        with self._handle.lock:
            _capi.api().ok(_capi.api().clear_functions(self.pointer))

    def set_global(self, name: str, data: Buffer) -> None:
        """Writes `data` (exactly the global's size) into the ``__device__`` global `name`
        (exported with CUDAQ_RT_EXPORT_GLOBAL): now when loaded, else at the load; kept for later
        loads and reloads. While the kernel runs it is written between two requests, so that no
        request sees part of the old value and part of the new."""
        with Pinned(data, f"set_global {name!r}") as view, self._handle.lock:
            _capi.api().ok(_capi.api().set_global(self.pointer, name.encode(), view.address,
                                                     view.size))

    def reload(self, code: Code) -> ReloadReport:
        """Swaps the running kernel's code for `code`, keeping the GPU, bridge (and what waits in
        its ring), counters, globals and function table (by handler name). `code` is verified,
        checked against the table and globals and linked while the old code serves; a refusal
        (RefusedError) changes nothing. No request is lost or answered twice."""
        info = _capi.ReloadInfo()
        with _devices.exclusive(self._handle):
            _capi.api().ok(_capi.api().reload(self.pointer, code.pointer, ctypes.byref(info)))
        self._code = code
        self._codes.append(code)
        del self._codes[:-1]
        self._ids.clear()
        self._c_ids.clear()
        return ReloadReport(bool(info.swapped), info.stage_ms, info.hold_ms, info.swap_ms,
                            info.launch_ms)

    # -- requests ---------------------------------------------------------------------------

    @property
    def slot_size(self) -> int:
        """Bytes per frame slot of the bridge instance (0 before a load)."""
        return int(_capi.api().slot_size(self.pointer))

    @property
    def max_payload(self) -> int:
        """The most bytes of arguments, or of a result, one request can carry."""
        return max(self.slot_size - HEADER_SIZE, 0)

    def function_id(self, handler: Handler) -> int:
        """The function_id requests to `handler` carry: a number as given, or the FNV-1a of one
        of the code's export names or aliases."""
        if isinstance(handler, int):
            if not 0 <= handler <= 0xFFFFFFFF:
                raise ArgumentError(f"'{self._code.label}': function_id {handler} is not a 32-bit "
                                    "unsigned number")
            return handler
        fid = self._ids.get(handler)
        if fid is None:
            if handler not in self._code.handlers:
                exports = ", ".join(self._code.handlers) or "none"
                raise NotFoundError(f"'{self._code.label}': no handler '{handler}': the code "
                                    f"exports {exports}")
            fid = self._ids[handler] = _fnv1a(handler)
        return fid

    def call_raw(self, handler: Handler, arg: Buffer = b"", *, timeout: float = 1.0) -> Answer:
        """One request and its answer, whatever its status."""
        return Answer(*self._call_to_bytes(self._c_id(handler), arg, timeout))

    @overload
    def call(self, handler: Handler, arg: Buffer = ..., *, timeout: float = ...) -> bytes: ...

    @overload
    def call(self, handler: Handler, arg: Buffer = ..., *, result: "npt.DTypeLike",
             timeout: float = ...) -> "npt.NDArray[Any]": ...

    @overload
    def call(self, handler: Handler, arg: Buffer = ..., *, out: Buffer,
             timeout: float = ...) -> int: ...

    def call(self, handler: Handler, arg: Buffer = b"", *, result: Any = None, out: Any = None,
             timeout: float = 1.0) -> Any:
        """Calls `handler` with `arg` (any buffer: bytes, a numpy array, ...) and returns its
        result: as bytes; or, with `result` (a numpy dtype), as a 1-D array of it; or, with
        `out` (a writable buffer), written into `out` in place, returning its length. A status
        other than 0 raises HandlerError (> 0, the handler's) or ProtocolError (< 0). No answer
        within `timeout` seconds raises CallTimeoutError; a kernel that faulted, FailedError
        naming it.

        While the server runs, a build with cudaq_rt._fastcall serves this method in C with the
        same arguments and results (its stand-in is this instance's ``call``).
        """
        return self._call_general(handler, arg, result, out, timeout, None)

    def _call_general(self, handler: Handler, arg: Buffer, result: Any, out: Any,
                      timeout: float, answer: Any) -> Any:
        """:meth:`call` through ctypes, or the failure of its call in C, `answer` (the tuple of
        cudaq_rt._fastcall's call or call_into; None: there was none), raised."""
        if answer is not None:
            rc, status, data = answer
            self._raise_for(handler, rc, status, data if out is None else _head(out, data))
        c_fid = self._c_ids.get(handler) if type(handler) is str else None
        if c_fid is None:
            c_fid = self._c_id(handler)
        if out is None and result is None:
            status, data = self._call_to_bytes(c_fid, arg, timeout)
            if status:
                raise_for_status(self._name(handler), status, data)
            return data
        if out is not None:
            with Pinned(out, "out", writable=True) as into:
                status, n = self._call(c_fid, arg, timeout, into.address, into.size)
            if status != 0:
                raise_for_status(self._name(handler), status, _head(out, n))
            return n
        import numpy as np

        dt = np.dtype(result)
        array_out = np.empty(max(self.max_payload // dt.itemsize, 1), dt)
        status, n = self._call(c_fid, arg, timeout, array_out.ctypes.data, array_out.nbytes)
        name = self._name(handler)
        if status != 0:
            raise_for_status(name, status, array_out.tobytes()[:n])
        if n % dt.itemsize:
            raise ArgumentError(f"{name}: the result is {n} bytes, not a whole number of "
                                f"{dt} ({dt.itemsize} bytes each)")
        return array_out[:n // dt.itemsize]

    def _raise_for(self, handler: Handler, rc: int, status: int, result: bytes) -> NoReturn:
        """A fast call's failure: the C API's error, else the handler's status."""
        _capi.api().ok(rc)
        raise_for_status(self._name(handler), status, result)
        raise AssertionError(f"{handler!r}: status {status} raised nothing")

    @staticmethod
    def _name(handler: Handler) -> str:
        return handler if isinstance(handler, str) else f"function_id {handler:#x}"

    # One call's cost is mostly ctypes' own: the calls below go through Api.call_prepared with
    # their arguments as ctypes objects made once (the server, each handler's function_id, the
    # result buffer, each timeout), and bytes passed in place.

    def _c_id(self, handler: Handler) -> ctypes.c_uint32:
        c_fid = self._c_ids.get(handler) if type(handler) is str else None
        if c_fid is None:
            c_fid = ctypes.c_uint32(self.function_id(handler))
            if type(handler) is str:
                self._c_ids[handler] = c_fid
        return c_fid

    def _c_timeout(self, timeout: float) -> ctypes.c_double:
        c_timeout = self._c_timeouts.get(timeout)
        if c_timeout is None:
            c_timeout = ctypes.c_double(timeout)
            if len(self._c_timeouts) < 16:  # the few a program uses, not one per call
                self._c_timeouts[timeout] = c_timeout
        return c_timeout

    def _call_to_bytes(self, c_fid: ctypes.c_uint32, arg: Buffer,
                       timeout: float) -> tuple[int, bytes]:
        """cudaq_rt_call into the server's result buffer, copied out under the server's lock
        (another thread's call would write the same buffer): (status, result)."""
        with self._handle.lock:
            if not self._c_result.value or not self._handle.pointer:
                self.pointer  # closed: says so
                raise StateError(f"'{self._code.label}': cudaq_rt_call: the dispatch kernel is "
                                 "not running")
            status, n = self._call(c_fid, arg, timeout, self._c_result, len(self._result_view))
            return status, self._result_view[:n].tobytes()

    def _call(self, c_fid: ctypes.c_uint32, arg: Buffer, timeout: float,
              into: int | ctypes.c_void_p, capacity: int) -> tuple[int, int]:
        """cudaq_rt_call under the server's lock, the result to `into`: (status, its length)."""
        with self._handle.lock:
            if not self._handle.pointer:
                raise StateError(f"'{self._code.label}': the server is closed")
            if type(into) is int:
                into = ctypes.c_void_p(into)
            if type(arg) is bytes:  # passed in place by ctypes itself
                if len(arg) > 0x7FFFFFFF:
                    raise ArgumentError(f"{len(arg)} bytes of arguments: more than a call takes")
                rc = self._c_prepared(self._c_server, c_fid, arg, len(arg), into, capacity,
                                      self._result_len_ref, self._status_ref,
                                      self._c_timeout(timeout))
            else:
                with Pinned(arg, "the argument") as view:
                    rc = self._c_prepared(self._c_server, c_fid, ctypes.c_void_p(view.address),
                                          view.size, into, capacity, self._result_len_ref,
                                          self._status_ref, self._c_timeout(timeout))
            if rc:
                _capi.api().ok(rc)
            return self._status.value, self._result_len.value

    def call_batch(self, handler: Handler, args: Buffer | Sequence[Buffer], *,
                   result_size: int | None = None, inflight: int = 32,
                   timeout: float = 1.0) -> BatchResult:
        """Sends one request per argument, up to `inflight` at a time, and returns every answer,
        at the C API's speed (one C call for the whole batch). `args` is a 2-D buffer (a numpy
        array of shape (n, k): n requests of k bytes each, read in place) or a sequence of
        buffers (of any lengths). Each result has room for `result_size` bytes (default: the
        most a slot holds). Handler errors do not raise: see BatchResult.statuses and
        BatchResult.raise_for_status."""
        fid = self.function_id(handler)
        name = self._name(handler)
        size = self.max_payload if result_size is None else result_size
        if size < 0:
            raise ArgumentError(f"{name}: result_size {size} is negative")
        packed: Any
        lengths_in: array.array[int] | None = None
        if isinstance(args, (list, tuple)):
            views = [memoryview(a).cast("B") for a in args]
            stride = max((len(v) for v in views), default=0)
            packed = bytearray(stride * len(views))
            for i, v in enumerate(views):
                packed[i * stride:i * stride + len(v)] = v
            lengths_in = array.array("I", (len(v) for v in views))
            count = len(views)
        else:
            packed = args
        with Pinned(packed, f"{name}: args") as view:
            if lengths_in is None:
                if len(view.shape) != 2:
                    raise ArgumentError(f"{name}: args: a buffer of shape {view.shape}; a batch "
                                        "is 2-D (one row per request) or a sequence of buffers")
                count = view.shape[0]
                stride = view.shape[1] * view.itemsize
            data = bytearray(size * count)
            lengths = array.array("I", bytes(4 * count))
            statuses = array.array("i", bytes(4 * count))
            with Pinned(data, "results", writable=True) as out, \
                    Pinned(lengths, "lengths", writable=True) as lens, \
                    Pinned(statuses, "statuses", writable=True) as st, \
                    self._handle.lock:
                arg_lens = None
                if lengths_in is not None:
                    arg_lens = lengths_in.buffer_info()[0]
                _capi.api().ok(_capi.api().call_batch(
                    self.pointer, fid, view.address, stride, arg_lens, count, out.address, size,
                    lens.address, st.address, inflight, timeout))
        return BatchResult(name, data, size, lengths, statuses)

    def bench(self, handler: Handler, payload: Buffer = b"", *, requests: int = 10_000,
              inflight: int = 1, warmup: int | None = None, expect_echo: bool | None = None,
              timeout: float = 10.0) -> BenchReport:
        """Sends `warmup` (default: 1,000, or `requests` when fewer) and then `requests`
        requests with the same payload, `inflight` at a time, as ``cudaq-rt-run --bench`` does,
        and measures the latter. `expect_echo` (default: when `handler` is "echo") checks every
        result is its own request's payload."""
        fid = self.function_id(handler)
        echo = handler == "echo" if expect_echo is None else expect_echo
        report = _capi.BenchReport()
        report.struct_size = ctypes.sizeof(report)
        with Pinned(payload, "the payload") as view, self._handle.lock:
            _capi.api().ok(_capi.api().bench(
                self.pointer, fid, view.address, view.size, requests, inflight,
                min(1000, requests) if warmup is None else warmup, 1 if echo else 0, timeout,
                ctypes.byref(report)))
        return BenchReport(report.requests, report.wrong, report.seconds, report.requests_per_s,
                           report.min_us, report.mean_us, report.p50_us, report.p90_us,
                           report.p99_us, report.p999_us, report.max_us)

    def send(self, frame: Buffer) -> bool:
        """Queues a whole request frame (cudaq_rt_client.wire.request builds one) on a host-fed
        bridge; False when every slot is in flight."""
        accepted = ctypes.c_int()
        with Pinned(frame, "the frame") as view, self._handle.lock:
            _capi.api().ok(_capi.api().send(self.pointer, view.address, view.size,
                                               ctypes.byref(accepted)))
        return bool(accepted.value)

    def receive(self) -> bytes | None:
        """The oldest response frame, or None when none has come yet."""
        buffer = ctypes.create_string_buffer(max(self.slot_size, HEADER_SIZE))
        size = ctypes.c_size_t()
        with self._handle.lock:
            _capi.api().ok(_capi.api().receive(self.pointer, buffer, len(buffer),
                                                  ctypes.byref(size)))
        return buffer.raw[:size.value] if size.value else None

    def stats(self) -> Stats:
        """The kernel's counters, read live (from any thread, while others call)."""
        s = _capi.DispatchStats()
        _capi.api().ok(_capi.api().get_stats(self.pointer, ctypes.byref(s)))
        return Stats(s.requests, s.ok, s.handler_errors, s.protocol_errors)


def _create(code: int, config: Any, out: Any) -> int:
    """cudaq_rt_server_create, or the factory a test put in its place (set_server_factory)."""
    return int((_factory or _capi.api().server_create)(code, config, out))


_factory: Any = None


def set_server_factory(factory: Any) -> None:
    """For tests without a GPU: servers are made by `factory` (a C function with
    cudaq_rt_server_create's signature, e.g. one that plays the GPU with host memory) instead."""
    global _factory
    if factory is not None:
        factory.restype = ctypes.c_int
        factory.argtypes = [ctypes.c_void_p, ctypes.POINTER(_capi.Config),
                            ctypes.POINTER(ctypes.c_void_p)]
    _factory = factory
