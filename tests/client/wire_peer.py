"""The peer of tests/client/test_client.py: a small UDP server in a thread, written from
libdispatch/include/cudaq_rt/wire.h alone, sharing no code with the package it tests."""
import socket
import struct
import threading


def fnv1a(name):
    h = 0x811C9DC5
    for b in name.encode():
        h ^= b
        h = (h * 0x01000193) % (1 << 32)
    return h


class Server:
    """A UDP server on 127.0.0.1 in a thread. Handlers: echo, sum_i32 (i32 values, an i64 sum),
    fail (status 7, result 'bad'), drop (no answer), stale (first an answer to another request_id,
    then its own), garbage (a datagram that is not a response). Any other function: -1. With
    `mangle`, echo answers to payloads whose 9th byte is a multiple of 5 come back with their
    last byte changed."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.received = []
        self.mangle = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def close(self):
        self.sock.sendto(b"stop", self.sock.getsockname())
        self.thread.join(5)
        self.sock.close()

    @staticmethod
    def answer(status, request_id, ptp, result=b""):
        return struct.pack("<IiIIQ", 0x43555153, status, len(result), request_id, ptp) + result

    def serve(self):
        handlers = {fnv1a(n): n for n in ("echo", "sum_i32", "fail", "drop", "stale", "garbage")}
        while True:
            data, peer = self.sock.recvfrom(1 << 16)
            if data == b"stop":
                return
            self.received.append(data)
            if len(data) < 16:  # too short to carry a request_id: dropped
                continue
            if len(data) < 24:
                self.sock.sendto(self.answer(-4, struct.unpack_from("<I", data, 12)[0], 0), peer)
                continue
            magic, fid, arg_len, rid, ptp = struct.unpack("<IIIIQ", data[:24])
            body = data[24:]
            if magic != 0x43555152:
                reply = self.answer(-1, rid, ptp)
            elif arg_len != len(body):
                reply = self.answer(-4 if arg_len > len(body) else -6, rid, ptp)
            else:
                reply = self.handle(handlers.get(fid), body, rid, ptp, peer)
            if reply is not None:
                self.sock.sendto(reply, peer)

    def handle(self, name, body, rid, ptp, peer):
        if name == "echo":
            if self.mangle and len(body) > 8 and body[8] % 5 == 0:
                return self.answer(0, rid, ptp, body[:-1] + bytes([body[-1] ^ 0xFF]))
            return self.answer(0, rid, ptp, body)
        if name == "sum_i32":
            total = sum(struct.unpack("<%di" % (len(body) // 4), body))
            return self.answer(0, rid, ptp, struct.pack("<q", total))
        if name == "fail":
            return self.answer(7, rid, ptp, b"bad")
        if name == "drop":
            return None
        if name == "stale":
            self.sock.sendto(self.answer(0, (rid - 1) % (1 << 32), ptp, b"old"), peer)
            return self.answer(0, rid, ptp, b"new")
        if name == "garbage":
            return b"GARBAGE! not a response frame"
        return self.answer(-1, rid, ptp)
