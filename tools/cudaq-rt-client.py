#!/usr/bin/python3
"""cudaq-rt-client: the reference client of cudaq-rt's wire format (libdispatch/include/cudaq_rt/
wire.h) over UDP, for a server started with `cudaq-rt-run PKG --serve`. A module the tests import
and a command:

  cudaq-rt-client.py 127.0.0.1:40123 --call echo --text hello
  cudaq-rt-client.py 127.0.0.1:40123 --call sum_i32 --i32 1,2,3 --result i64
  cudaq-rt-client.py 127.0.0.1:40123 --load 100000 --window 16     (echo, every answer checked)
  cudaq-rt-client.py 127.0.0.1:40123 --raw 43555152                 (any bytes; prints the answer)

Exit status as cudaq-rt-run's: 0 ok, 1 failure (no answer, a wrong one), 2 usage, 3 handler
error, 4 protocol error.
"""
import argparse
import collections
import os
import socket
import struct
import sys
import time

REQUEST_MAGIC = 0x43555152  # 'CUQR'
RESPONSE_MAGIC = 0x43555153  # 'CUQS'
TRUNCATED_MAGIC = 0x43555154  # 'CUQT'
HEADER = struct.Struct("<IIIIQ")  # magic, function_id | status, arg_len | result_len, request_id, ptp
RESPONSE = struct.Struct("<IiIIQ")
STATUS_NAMES = {0: "ok", -1: "unknown function or bad magic", -2: "payload too large",
                -3: "result too large", -4: "truncated", -5: "handler fault", -6: "bad length"}

Response = collections.namedtuple("Response", "status request_id ptp_timestamp result")


def function_id(name):
    """FNV-1a, 32 bits, of a handler's exported name."""
    h = 2166136261
    for b in name.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def request(handler, payload=b"", request_id=0, ptp_timestamp=0, arg_len=None, magic=REQUEST_MAGIC):
    """A request frame; `handler` is a name or a function_id. arg_len and magic may be forced
    (to build malformed frames)."""
    fid = handler if isinstance(handler, int) else function_id(handler)
    n = len(payload) if arg_len is None else arg_len
    return HEADER.pack(magic, fid, n, request_id, ptp_timestamp) + bytes(payload)


def parse_response(data):
    """A response frame as a Response; ValueError when it is not one."""
    if len(data) < RESPONSE.size:
        raise ValueError(f"a response of {len(data)} bytes is shorter than its 24-byte header")
    magic, status, result_len, request_id, ptp = RESPONSE.unpack_from(data)
    if magic != RESPONSE_MAGIC:
        raise ValueError(f"response magic 0x{magic:08x}, not 0x{RESPONSE_MAGIC:08x}")
    if result_len != len(data) - RESPONSE.size:
        raise ValueError(f"result_len {result_len} but {len(data) - RESPONSE.size} bytes follow")
    return Response(status, request_id, ptp, bytes(data[RESPONSE.size:]))


def status_name(status):
    return "handler error" if status > 0 else STATUS_NAMES.get(status, "unknown protocol error")


def parse_address(text):
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"'{text}' is not HOST:PORT")
    return host.strip("[]"), int(port)


class Client:
    """One UDP socket talking to one server. Answers come back to this socket only."""

    def __init__(self, address, timeout=5.0):
        host, port = parse_address(address) if isinstance(address, str) else address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.connect((host, port))  # only the server's datagrams reach this socket
        self.sock.settimeout(timeout)
        self.next_id = 1

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, frame):
        self.sock.send(frame)

    def receive(self, timeout=None):
        """The next datagram as a Response (None on timeout)."""
        if timeout is not None:
            self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 16)
        except socket.timeout:
            return None
        return parse_response(data)

    def call(self, handler, payload=b"", timeout=None):
        rid = self.next_id
        self.next_id = (self.next_id + 1) & 0xFFFFFFFF
        self.send(request(handler, payload, rid, time.monotonic_ns()))
        while True:
            r = self.receive(timeout)
            if r is None:
                raise TimeoutError(f"no answer to request_id {rid}")
            if r.request_id == rid:
                return r

    def load(self, count, window=16, payload_bytes=16, tag=None, first_id=0, timeout=5.0):
        """Sends `count` echo requests, `window` in flight; each payload carries `tag` (8 bytes)
        and the request's number, and each answer is checked against what this client sent.
        Returns a dict of counts (answered, wrong, lost) and round-trip latencies in us."""
        tag = os.urandom(8) if tag is None else tag
        fid = function_id("echo")
        pending = {}  # request_id -> (payload, send time)
        sent = answered = wrong = 0
        rtts = []
        self.sock.settimeout(timeout)
        while answered + wrong < count:
            while sent < count and len(pending) < window:
                rid = (first_id + sent) & 0xFFFFFFFF
                body = tag + struct.pack("<Q", sent)
                body += bytes((sent + i) & 0xFF for i in range(max(0, payload_bytes - 16)))
                pending[rid] = (body, time.perf_counter())
                self.sock.send(request(fid, body, rid, sent))
                sent += 1
            try:
                data = self.sock.recv(1 << 16)
            except socket.timeout:
                break  # whatever is pending now is lost
            now = time.perf_counter()
            try:
                r = parse_response(data)
            except ValueError:
                wrong += 1
                continue
            entry = pending.pop(r.request_id, None)
            if entry is None or r.status != 0 or r.result != entry[0]:
                wrong += 1
                continue
            answered += 1
            rtts.append((now - entry[1]) * 1e6)
        return {"sent": sent, "answered": answered, "wrong": wrong, "lost": len(pending),
                "rtt_us": rtts}


def percentile(sorted_values, p):
    if not sorted_values:
        return 0.0
    rank = max(1, -(-len(sorted_values) * p // 100))
    return sorted_values[int(rank) - 1]


def encode_payload(args):
    if args.hex is not None:
        return bytes.fromhex(args.hex)
    if args.text is not None:
        return args.text.encode()
    for kind, fmt in (("i32", "<i"), ("u32", "<I"), ("f32", "<f"), ("i64", "<q"), ("f64", "<d")):
        values = getattr(args, kind)
        if values is not None:
            conv = float if kind.startswith("f") else int
            return b"".join(struct.pack(fmt, conv(v)) for v in values.split(",") if v)
    return b""


def decode_result(kind, data):
    if kind == "hex":
        return data.hex()
    if kind == "str":
        return data.decode(errors="backslashreplace")
    fmt = {"i32": "<i", "u32": "<I", "f32": "<f", "i64": "<q", "u64": "<Q", "f64": "<d"}[kind]
    size = struct.calcsize(fmt)
    return ",".join(str(struct.unpack_from(fmt, data, i)[0])
                    for i in range(0, len(data) - len(data) % size, size))


def main(argv=None):
    p = argparse.ArgumentParser(prog="cudaq-rt-client", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("address", help="HOST:PORT the server printed ('serving on ...')")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--call", metavar="NAME", help="call the handler NAME once")
    what.add_argument("--load", metavar="N", type=int, help="send N echo requests and check each")
    what.add_argument("--raw", metavar="HEX", help="send these bytes as one datagram")
    for kind in ("hex", "text", "i32", "u32", "f32", "i64", "f64"):
        p.add_argument("--" + kind, metavar="V", help=f"the call's payload as {kind}")
    p.add_argument("--result", default="hex", help="hex, str, i32, u32, f32, i64, u64 or f64")
    p.add_argument("--window", type=int, default=16, help="--load: requests in flight")
    p.add_argument("--payload", type=int, default=16, help="--load: payload bytes (>= 16)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for an answer")
    args = p.parse_args(argv)
    try:
        client = Client(args.address, args.timeout)
    except (ValueError, OSError) as e:
        print(f"cudaq-rt-client: error: {e}", file=sys.stderr)
        return 2
    with client:
        if args.load is not None:
            r = client.load(args.load, args.window, max(16, args.payload), timeout=args.timeout)
            rtt = sorted(r["rtt_us"])
            print(f"sent {r['sent']}, answered {r['answered']}, wrong {r['wrong']}, "
                  f"lost {r['lost']}; round trip us: p50 {percentile(rtt, 50):.1f} "
                  f"p99 {percentile(rtt, 99):.1f} max {rtt[-1] if rtt else 0:.1f}")
            return 0 if r["answered"] == args.load else 1
        try:
            if args.raw is not None:
                client.send(bytes.fromhex(args.raw))
                r = client.receive()
                if r is None:
                    print("no answer", file=sys.stderr)
                    return 1
            else:
                r = client.call(args.call, encode_payload(args))
        except (TimeoutError, ValueError, OSError) as e:
            print(f"cudaq-rt-client: error: {e}", file=sys.stderr)
            return 1
        text = status_name(r.status) + (f" {r.status}" if r.status > 0 else "")
        if r.status < 0 or not r.result:
            print(f"{text} (request_id {r.request_id})")
        else:
            print(f"{text}: {decode_result(args.result, r.result)}")
        return 0 if r.status == 0 else 3 if r.status > 0 else 4


if __name__ == "__main__":
    sys.exit(main())
