# Types of cudaq_rt._fastcall (python/native/fastcall.c), which the package loads by path
# (cudaq_rt/_library.py: fastcall) where the runtime's build made it.
from typing import Any

class Caller:
    """cudaq_rt_call for one server, under its lock."""

    def __init__(self, call_address: int, server_address: int, lock: Any, capacity: int,
                 ids: dict[str, int]) -> None: ...
    def call(self, handler: str | int, arg: Any,
             timeout: float) -> bytes | tuple[int, int, bytes] | None: ...
    def call_into(self, handler: str | int, arg: Any, out: Any,
                  timeout: float) -> int | tuple[int, int, int] | None: ...
    def detach(self) -> None: ...
