"""What a server reports: its counters, an answer, a batch's answers, a benchmark, a reload."""
from __future__ import annotations

import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple

from .errors import HandlerError, ProtocolError

if TYPE_CHECKING:
    import numpy.typing as npt


@dataclass(frozen=True)
class Stats:
    """The dispatch kernel's counters, read live from mapped memory."""

    requests: int
    """Frames taken from the bridge."""
    ok: int
    """Answered with status 0."""
    handler_errors: int
    """Answered with a handler's status > 0."""
    protocol_errors: int
    """Refused by the kernel (status < 0): an unknown function, a bad frame, a handler fault."""


class Answer(NamedTuple):
    """A handler's answer: its status (0 ok, > 0 the handler's, < 0 a protocol error) and the
    result's bytes."""

    status: int
    result: bytes


def raise_for_status(handler: str, status: int, result: bytes) -> None:
    """Raises HandlerError (status > 0) or ProtocolError (status < 0)."""
    if status > 0:
        raise HandlerError(handler, status, result)
    if status < 0:
        raise ProtocolError(handler, status, result)


class BatchResult:
    """The answers of :meth:`Server.call_batch`: request ``i``'s status is ``statuses[i]``, its
    result the first ``lengths[i]`` bytes of row ``i`` of ``data`` (``result_size`` bytes a
    row). Indexing gives an answer's bytes; :meth:`array` all of them as one numpy array."""

    def __init__(self, handler: str, data: bytearray, result_size: int, lengths: "array.array[int]",
                 statuses: "array.array[int]") -> None:
        self.handler = handler
        self.data = data
        self.result_size = result_size
        self.lengths = lengths
        self.statuses = statuses

    def __len__(self) -> int:
        return len(self.statuses)

    def __getitem__(self, i: int) -> bytes:
        start = i * self.result_size if i >= 0 else (len(self) + i) * self.result_size
        return bytes(self.data[start:start + self.lengths[i]])

    def __iter__(self) -> Iterator[bytes]:
        return (self[i] for i in range(len(self)))

    def answer(self, i: int) -> Answer:
        """Request ``i``'s status and result."""
        return Answer(self.statuses[i], self[i])

    @property
    def failures(self) -> int:
        """How many answers had a status other than 0."""
        return sum(1 for s in self.statuses if s != 0)

    def raise_for_status(self) -> None:
        """Raises the HandlerError or ProtocolError of the first answer whose status is not 0."""
        for i, status in enumerate(self.statuses):
            if status != 0:
                raise_for_status(f"{self.handler} (request {i})", status, self[i])

    def array(self, dtype: "npt.DTypeLike") -> "npt.NDArray[Any]":
        """Every result as one array of shape (n, result_size // itemsize), a view of ``data``
        (no copy). Every answer must be ok and exactly ``result_size`` bytes long."""
        import numpy as np

        self.raise_for_status()
        short = [i for i, n in enumerate(self.lengths) if n != self.result_size]
        if short:
            i = short[0]
            raise ValueError(f"{self.handler}: request {i}'s result is {self.lengths[i]} bytes, "
                             f"not the {self.result_size} of every row")
        dt = np.dtype(dtype)
        return np.frombuffer(self.data, dt).reshape(len(self), self.result_size // dt.itemsize)


@dataclass(frozen=True)
class BenchReport:
    """A benchmark's measurements (cudaq-rt-run --bench's): latencies in microseconds from
    handing a request to the bridge to taking its answer, nearest-rank percentiles."""

    requests: int
    wrong: int
    """Answers with a status other than 0, another request's id, or a wrong echo."""
    seconds: float
    requests_per_s: float
    min_us: float
    mean_us: float
    p50_us: float
    p90_us: float
    p99_us: float
    p999_us: float
    max_us: float

    def __str__(self) -> str:
        return (f"{self.requests} requests in {self.seconds:.3f} s ({self.requests_per_s:,.0f}/s), "
                f"{self.wrong} wrong; latency us: min {self.min_us:.2f} p50 {self.p50_us:.2f} "
                f"p90 {self.p90_us:.2f} p99 {self.p99_us:.2f} p99.9 {self.p999_us:.2f} "
                f"max {self.max_us:.2f}")


@dataclass(frozen=True)
class ReloadReport:
    """What :meth:`Server.reload` did, in milliseconds on the host's clock."""

    swapped: bool
    """False: it was the code and globals already serving, and nothing changed."""
    stage_ms: float
    hold_ms: float
    swap_ms: float
    launch_ms: float
