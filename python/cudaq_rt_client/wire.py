"""The frames of cudaq-rt's wire format (libdispatch/include/cudaq_rt/wire.h).

Every frame is little-endian and starts with a 24-byte header:

  request  = u32 magic 'CUQR', u32 function_id, u32 arg_len,    u32 request_id, u64 ptp_timestamp
  response = u32 magic 'CUQS', i32 status,      u32 result_len, u32 request_id, u64 ptp_timestamp

followed by the payload (arg_len bytes) or the result (result_len bytes). A response echoes the
request's request_id and ptp_timestamp. function_id is FNV-1a, 32 bits, of the handler's exported
name. status is 0 for ok, > 0 handler-defined, < 0 a protocol error; a protocol error carries no
result bytes.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

REQUEST_MAGIC = 0x43555152  # 'CUQR'
RESPONSE_MAGIC = 0x43555153  # 'CUQS'
# Put in place of the magic by a bridge that received fewer bytes than a header claims; a client
# that sends it is answered STATUS_TRUNCATED.
TRUNCATED_MAGIC = 0x43555154  # 'CUQT'
HEADER_SIZE = 24

STATUS_OK = 0
STATUS_UNKNOWN_FUNCTION = -1
STATUS_BAD_MAGIC = -1
STATUS_PAYLOAD_TOO_LARGE = -2
STATUS_RESULT_TOO_LARGE = -3
STATUS_TRUNCATED = -4
STATUS_HANDLER_FAULT = -5
STATUS_BAD_LENGTH = -6

_PROTOCOL_STATUS_NAMES = {
    STATUS_OK: "ok",
    STATUS_UNKNOWN_FUNCTION: "unknown function or bad magic",
    STATUS_PAYLOAD_TOO_LARGE: "payload too large",
    STATUS_RESULT_TOO_LARGE: "result too large",
    STATUS_TRUNCATED: "truncated",
    STATUS_HANDLER_FAULT: "handler fault",
    STATUS_BAD_LENGTH: "bad length",
}

_FNV1A_OFFSET = 2166136261
_FNV1A_PRIME = 16777619
_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF

_REQUEST = struct.Struct("<IIIIQ")
_RESPONSE = struct.Struct("<IiIIQ")


class ProtocolError(ValueError):
    """Bytes that are not a well-formed frame."""


class Request(NamedTuple):
    function_id: int
    request_id: int
    ptp_timestamp: int
    payload: bytes


class Response(NamedTuple):
    status: int
    request_id: int
    ptp_timestamp: int
    result: bytes


def function_id(name: str) -> int:
    """FNV-1a, 32 bits, of a handler's exported name (its UTF-8 bytes; a name from the command
    line that is not UTF-8, its bytes as given)."""
    h = _FNV1A_OFFSET
    for b in name.encode("utf-8", "surrogateescape"):
        h = ((h ^ b) * _FNV1A_PRIME) & _U32
    return h


def status_name(status: int) -> str:
    """The name cudaq-rt-run prints for a status: 'handler error' for any status > 0."""
    if status > 0:
        return "handler error"
    return _PROTOCOL_STATUS_NAMES.get(status, "unknown protocol error")


def status_text(status: int) -> str:
    """status_name, with the number of a handler-defined status: 'handler error 3'."""
    return f"handler error {status}" if status > 0 else status_name(status)


def _check_range(what: str, value: int, mask: int) -> None:
    if not 0 <= value <= mask:
        raise ValueError(f"{what} {value} does not fit {mask.bit_length()} unsigned bits")


def request(handler: str | int, payload: bytes = b"", request_id: int = 0,
            ptp_timestamp: int = 0, *, arg_len: int | None = None,
            magic: int = REQUEST_MAGIC) -> bytes:
    """A request frame. `handler` is a name or a function_id. `arg_len` and `magic` may be forced
    to other values than the frame's own, to build malformed frames for tests of a server."""
    fid = handler if isinstance(handler, int) else function_id(handler)
    n = len(payload) if arg_len is None else arg_len
    _check_range("function_id", fid, _U32)
    _check_range("arg_len", n, _U32)
    _check_range("request_id", request_id, _U32)
    _check_range("ptp_timestamp", ptp_timestamp, _U64)
    _check_range("magic", magic, _U32)
    return _REQUEST.pack(magic, fid, n, request_id, ptp_timestamp) + bytes(payload)


def parse_request(data: bytes) -> Request:
    """A whole request frame (what a server takes from one datagram); ProtocolError otherwise."""
    if len(data) < HEADER_SIZE:
        raise ProtocolError(f"a request of {len(data)} bytes is shorter than its "
                            f"{HEADER_SIZE}-byte header")
    magic, fid, arg_len, request_id, ptp = _REQUEST.unpack_from(data)
    if magic != REQUEST_MAGIC:
        raise ProtocolError(f"request has magic 0x{magic:08x}, not 0x{REQUEST_MAGIC:08x} ('CUQR')")
    if arg_len != len(data) - HEADER_SIZE:
        raise ProtocolError(f"request claims {arg_len} payload bytes but "
                            f"{len(data) - HEADER_SIZE} follow its header")
    return Request(fid, request_id, ptp, bytes(data[HEADER_SIZE:]))


def response(status: int, result: bytes = b"", request_id: int = 0,
             ptp_timestamp: int = 0) -> bytes:
    """A response frame, as a server sends it."""
    if not -(1 << 31) <= status < (1 << 31):
        raise ValueError(f"status {status} does not fit 32 signed bits")
    if status < 0 and result:
        raise ValueError(f"a protocol error ({status}) carries no result bytes")
    _check_range("request_id", request_id, _U32)
    _check_range("ptp_timestamp", ptp_timestamp, _U64)
    return _RESPONSE.pack(RESPONSE_MAGIC, status, len(result), request_id,
                          ptp_timestamp) + bytes(result)


def parse_response(data: bytes) -> Response:
    """A response frame as a Response; ProtocolError when the bytes are not one: too short, a
    magic other than 'CUQS', a result_len other than the bytes that follow the header, or a
    protocol error that carries result bytes."""
    if len(data) < HEADER_SIZE:
        raise ProtocolError(f"a response of {len(data)} bytes is shorter than its "
                            f"{HEADER_SIZE}-byte header")
    magic, status, result_len, request_id, ptp = _RESPONSE.unpack_from(data)
    if magic != RESPONSE_MAGIC:
        raise ProtocolError(f"response has magic 0x{magic:08x}, not 0x{RESPONSE_MAGIC:08x} "
                            "('CUQS')")
    available = len(data) - HEADER_SIZE
    if result_len != available:
        raise ProtocolError(f"response claims {result_len} result bytes but {available} follow "
                            "its header")
    if status < 0 and result_len:
        raise ProtocolError(f"response has protocol status {status} ({status_name(status)}) and "
                            f"{result_len} result bytes; protocol errors carry none")
    return Response(status, request_id, ptp, bytes(data[HEADER_SIZE:]))
