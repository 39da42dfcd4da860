"""A client of one server (`cudaq-rt-run PKG --serve`) over UDP: one request per datagram, each
answer sent back to the address its request came from.

The socket is connected to the server, so the kernel hands it only that server's datagrams. Every
wait has a timeout, the client's own unless a call gives one; a wait that ends without an answer
raises NoAnswerError, a TimeoutError. A timeout given to one call applies to that call only.
"""
from __future__ import annotations

import socket
import time
from types import TracebackType

from .wire import Response, parse_response, request

_MAX_DATAGRAM = 1 << 16


class NoAnswerError(TimeoutError):
    """No answer arrived within the timeout."""


def parse_address(text: str) -> tuple[str, int]:
    """'HOST:PORT' or '[IPv6]:PORT' as (host, port); ValueError otherwise."""
    host, colon, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"'{text}' is not HOST:PORT (a port from 1 to 65535)")
    return host, int(port)


class Client:
    """One UDP socket talking to one server.

    `address` is 'HOST:PORT' or (host, port); `timeout` is how long, in seconds, a receive or a
    call waits unless it says otherwise. Request ids count up from `first_request_id`, 32 bits,
    wrapping around. OSError when the host cannot be resolved or the socket not made.
    """

    def __init__(self, address: str | tuple[str, int], timeout: float = 5.0,
                 first_request_id: int = 1) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout {timeout} is not more than 0 seconds")
        host, port = parse_address(address) if isinstance(address, str) else address
        family, kind, proto, _, peer = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        self.sock = socket.socket(family, kind, proto)
        try:
            # Room for the answers of many requests in flight (the kernel may give less).
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            self.sock.connect(peer)
        except OSError:
            self.sock.close()
            raise
        self.sock.settimeout(timeout)
        self.timeout = timeout
        self.peer = peer
        self._next_id = first_request_id & 0xFFFFFFFF

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def next_request_id(self) -> int:
        rid = self._next_id
        self._next_id = (rid + 1) & 0xFFFFFFFF
        return rid

    def send(self, frame: bytes) -> None:
        """Sends `frame` as one datagram, whatever its bytes are."""
        self.sock.send(frame)

    def _receive(self, timeout: float) -> bytes:
        if timeout <= 0:
            raise NoAnswerError("no answer")
        if timeout == self.timeout:
            try:
                return self.sock.recv(_MAX_DATAGRAM)
            except socket.timeout:
                raise NoAnswerError(f"no answer within {timeout:g} s") from None
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(_MAX_DATAGRAM)
        except socket.timeout:
            raise NoAnswerError(f"no answer within {timeout:g} s") from None
        finally:
            self.sock.settimeout(self.timeout)

    def receive(self, timeout: float | None = None) -> Response:
        """The next datagram from the server, as a Response. NoAnswerError when none arrives
        within `timeout` seconds (the client's timeout if None); wire.ProtocolError, a
        ValueError, when the datagram is not a response frame."""
        return parse_response(self._receive(self.timeout if timeout is None else timeout))

    def call(self, handler: str | int, payload: bytes = b"", timeout: float | None = None,
             ptp_timestamp: int | None = None) -> Response:
        """Sends one request to `handler` (a name or a function_id) and returns its answer: the
        next response with the request's request_id (answers to earlier requests, such as ones
        that timed out, are skipped). NoAnswerError when it does not come within `timeout`
        seconds in all; wire.ProtocolError when a datagram that is not a response arrives.
        ptp_timestamp is the wall clock in ns unless given."""
        wait = self.timeout if timeout is None else timeout
        rid = self.next_request_id()
        stamp = time.time_ns() if ptp_timestamp is None else ptp_timestamp
        self.send(request(handler, payload, rid, stamp))
        deadline = time.monotonic() + wait
        while True:
            try:
                answer = parse_response(self._receive(deadline - time.monotonic()))
            except NoAnswerError:
                raise NoAnswerError(f"no answer to request_id {rid} within {wait:g} s") from None
            if answer.request_id == rid:
                return answer
