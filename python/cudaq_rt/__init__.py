"""cudaq_rt: cudaq-rt's C API (cudaq_rt/cudaq_rt.h) in process.

Open device code, verified before any GPU work; serve it on a GPU with a dispatch kernel and a
bridge; call its handlers with any buffer (bytes, numpy arrays) and read their results, one by
one, in batches at C speed, or under a benchmark; set its ``__device__`` globals; read its
counters; swap it for new code while it serves::

    import numpy as np, cudaq_rt

    code = cudaq_rt.open_package("example.cudaqpkg", trust=["ci.pub"])
    with cudaq_rt.Server(code, bridge="loopback") as server:
        server.set_global("cudaq_rt_example_lut", np.fromfile("syndrome_table.bin", np.uint8))
        total = server.call("sum_i32", np.array([1, 2, 3, -10], np.int32), result=np.int64)
        print(server.bench("echo", b"\\x01" * 1024, requests=100_000, inflight=32))

Errors are exceptions carrying the C API's one-line message and code (:class:`Error` and its
subclasses); a handler's status other than 0 is a :class:`HandlerError`. The library
(libcudaq_rt.so.0) is found as :mod:`cudaq_rt._library` describes, or through
``$CUDAQ_RT_PREFIX``. The wire-level UDP client of ``cudaq-rt-run --serve`` is
:mod:`cudaq_rt_client`, installed beside this package."""
from ._buffers import Buffer
from ._library import LibraryNotFoundError, library_path
from .code import Code, open_package, open_self
from .errors import (ArgumentError, CallTimeoutError, Error, FailedError, HandlerError,
                     NoGpuError, NotFoundError, ProtocolError, RefusedError, StateError)
from .results import Answer, BatchResult, BenchReport, ReloadReport, Stats
from .server import Handler, Server
from cudaq_rt_client.wire import function_id

__version__ = "0.1.0"

__all__ = [
    "Answer", "ArgumentError", "BatchResult", "BenchReport", "Buffer", "CallTimeoutError", "Code",
    "Error", "FailedError", "Handler", "HandlerError", "LibraryNotFoundError", "NoGpuError",
    "NotFoundError", "ProtocolError", "RefusedError", "ReloadReport", "Server", "StateError",
    "Stats", "__version__", "function_id", "library_path", "open_package", "open_self",
]
