"""A load test of a server: `count` requests, up to `inflight` of them waiting for their answers at
any time, every answer checked, and the round trips measured.

An answer is right when it parses, carries the request_id of a request still waiting, status 0,
the request's ptp_timestamp echoed and, for `echo`, the request's payload. Anything else is wrong.
A request whose answer has not come when nothing arrived for `timeout` seconds is lost. Unless a
payload is given, each echo request carries a payload of its own (a tag of 8 random bytes and its
sequence number), so that an answer meant for another request or another client cannot pass.

Latency is the time from handing the datagram to the socket to reading its answer, on this host;
percentiles are nearest-rank, as cudaq-rt-run's: the p-th of n sorted samples is the one of rank
ceil(p/100 * n), always a measured value.
"""
from __future__ import annotations

import math
import os
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from .client import Client, NoAnswerError
from .wire import ProtocolError, function_id, request


@dataclass
class BenchResult:
    handler: str
    payload_bytes: int
    inflight: int
    sent: int = 0
    answered: int = 0
    wrong: int = 0
    lost: int = 0
    refused: bool = False  # it ended because the server's port was refused (the server is gone)
    seconds: float = 0.0
    latencies_us: list[float] = field(default_factory=list)

    @property
    def requests_per_s(self) -> float:
        return self.answered / self.seconds if self.seconds > 0 else 0.0

    def latency_us(self) -> dict[str, float]:
        """min, mean, p50, p90, p99, p99.9 and max of the right answers' round trips."""
        s = sorted(self.latencies_us)
        if not s:
            return {k: 0.0 for k in ("min", "mean", "p50", "p90", "p99", "p99.9", "max")}
        return {"min": s[0], "mean": math.fsum(s) / len(s), "p50": percentile(s, 50),
                "p90": percentile(s, 90), "p99": percentile(s, 99),
                "p99.9": percentile(s, 99.9), "max": s[-1]}

    def as_json(self) -> dict[str, Any]:
        return {"handler": self.handler, "payload_bytes": self.payload_bytes,
                "requests": self.sent, "inflight": self.inflight, "answered": self.answered,
                "wrong": self.wrong, "lost": self.lost, "seconds": self.seconds,
                "requests_per_s": self.requests_per_s, "latency_us": self.latency_us()}

    def text(self) -> str:
        l = self.latency_us()
        return (f"{self.handler}: {self.sent} requests of {self.payload_bytes} bytes, "
                f"{self.inflight} in flight: {self.answered} answered, {self.wrong} wrong, "
                f"{self.lost} lost\n"
                f"latency us: min {l['min']:.2f}  mean {l['mean']:.2f}  p50 {l['p50']:.2f}  "
                f"p90 {l['p90']:.2f}  p99 {l['p99']:.2f}  p99.9 {l['p99.9']:.2f}  "
                f"max {l['max']:.2f}\n"
                f"throughput: {self.requests_per_s:.0f} requests/s\n")


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest rank: the sample of rank ceil(p/100 * n); 0 for no samples."""
    if not sorted_values:
        return 0.0
    # In integers of thousandths, so that 99.9 of 1000 is rank 999, not a rounding away.
    rank = -(-len(sorted_values) * round(p * 1000) // 100000)
    return sorted_values[max(1, rank) - 1]


def bench(client: Client, count: int, inflight: int = 1, handler: str = "echo",
          payload: bytes | None = None, timeout: float | None = None,
          tag: bytes | None = None) -> BenchResult:
    """Sends `count` requests to `handler` through `client`, `inflight` at most waiting, and
    checks every answer. `payload` is every request's (None: for echo, a payload of its own per
    request, 16 bytes starting with `tag` (8 bytes, random unless given); for another handler,
    none). `timeout`: the client's unless given."""
    if count < 1 or inflight < 1:
        raise ValueError("count and inflight must be at least 1")
    wait = client.timeout if timeout is None else timeout
    echo = handler == "echo"
    tag = os.urandom(8) if tag is None else tag
    if len(tag) != 8:
        raise ValueError(f"tag of {len(tag)} bytes, not 8")
    fid = function_id(handler)
    result = BenchResult(handler, 16 if payload is None and echo else len(payload or b""),
                         inflight)
    pending: dict[int, tuple[bytes, int, float]] = {}  # request_id: payload, ptp, sent at
    start = last = time.perf_counter()
    while result.sent < count or pending:
        # No answer in time, or the server's port closed (it stopped, and the kernel answered a
        # request with ICMP port unreachable, which the next send or receive reports): what is
        # pending is lost.
        try:
            while result.sent < count and len(pending) < inflight:
                body = payload if payload is not None else (
                    tag + struct.pack("<Q", result.sent) if echo else b"")
                rid = client.next_request_id()
                stamp = result.sent
                client.send(request(fid, body, rid, stamp))
                pending[rid] = (body, stamp, time.perf_counter())
                result.sent += 1
            answer = client.receive(wait)
        except NoAnswerError:
            break
        except ConnectionRefusedError:
            result.refused = True
            break
        except ProtocolError:
            result.wrong += 1
            continue
        now = time.perf_counter()
        entry = pending.pop(answer.request_id, None)
        if entry is None or answer.status != 0 or answer.ptp_timestamp != entry[1] or (
                echo and answer.result != entry[0]):
            result.wrong += 1
            continue
        result.answered += 1
        result.latencies_us.append((now - entry[2]) * 1e6)
        last = now
    # Until the last right answer: the wait that finds a request lost is not throughput.
    result.seconds = last - start
    result.lost = len(pending)
    return result
