"""The servers of this process, and the one rule the driver imposes across them.

A dispatch kernel runs until it is told to stop, and the CUDA driver makes a module load, a
module unload and a device free wait until every kernel on the device has ended (measured on the
H200: bench/probe/load_while_serving.cu). One server's load, start, reload or close while
another's kernel runs would wait for ever. So each of those runs with the other servers' kernels
paused: stopped between two requests (requests sent meanwhile wait in their rings), the work
done, then started again on the same rings. Each server is used by one thread at a time (the C
API's rule), which its lock enforces; a pause takes the other servers' locks, so a call on one
of them waits for the pause rather than finding its kernel stopped."""
from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from . import _fastcall

from ._capi import api


class Handle:
    """A cudaq_rt_server pointer and what the process knows of it."""

    __slots__ = ("pointer", "lock", "running", "label", "fast", "__weakref__")

    def __init__(self, pointer: int, label: str) -> None:
        self.pointer = pointer
        self.lock = threading.RLock()
        self.running = False
        self.label = label
        # The server's cudaq_rt._fastcall.Caller, made at each start, which Server.call uses;
        # detached (under the lock) at a stop, the next start and the free.
        self.fast: _fastcall.Caller | None = None


_registry_lock = threading.RLock()
_live: "weakref.WeakSet[Handle]" = weakref.WeakSet()


def register(handle: Handle) -> None:
    with _registry_lock:
        _live.add(handle)


def forget(handle: Handle) -> None:
    with _registry_lock:
        _live.discard(handle)


@contextmanager
def exclusive(handle: Handle) -> Iterator[None]:
    """Runs the body holding `handle` with every other server's kernel stopped, and starts them
    again after it. A kernel that had ended by itself (a fault) stays ended, and one that cannot
    be started again stays stopped: their next calls say why. One that does not stop (hung) is
    an error, before anything is loaded.
    The registry's lock is taken before any server's (a call takes only its server's), so two
    of these cannot each hold a lock the other waits for."""
    with _registry_lock, handle.lock:
        paused: list[Handle] = []
        try:
            for other in list(_live):
                if other is handle or not other.running or not other.pointer:
                    continue
                other.lock.acquire()
                rc = api().stop(other.pointer)
                if rc != 0:
                    message = api().error_text()
                    if api().check(other.pointer) == 0:  # it still runs: hung, and would block
                        other.lock.release()
                        api().ok_with(rc, message)
                    other.running = False  # it ended by itself (a fault): its calls will say so
                    other.lock.release()
                    continue
                paused.append(other)
                other.running = False
            yield
        finally:
            for other in paused:
                try:
                    if api().start(other.pointer) == 0:
                        other.running = True
                finally:
                    other.lock.release()
