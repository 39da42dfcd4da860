#!/usr/bin/env python3
"""CPU tests of the Python client (python/cudaq_rt_client): frames byte for byte, the --arg and
--result syntax of cudaq-rt-run with its refusals word for word, Client's call and receive
semantics, the command's output, exit statuses and one-line errors, --bench, and `pip install`
into a fresh venv. The peer is a small UDP server in this file, written from wire.h and sharing no
code with the package (wire_peer.py)."""
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest
from decimal import Decimal, getcontext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
PYTHON_DIR = os.path.join(ROOT, "python")
LAUNCHER = os.path.join(ROOT, "tools", "cudaq-rt-client.py")
sys.path.insert(0, PYTHON_DIR)

import cudaq_rt_client as crc  # noqa: E402
from cudaq_rt_client import payload  # noqa: E402
from wire_peer import Server, fnv1a  # noqa: E402


class ServerCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        cls.server.close()

    def setUp(self):
        self.server.mangle = False


# --- frames --------------------------------------------------------------------------------------

class WireTest(unittest.TestCase):
    def test_function_ids(self):
        self.assertEqual(crc.function_id("echo"), 0xD49DD484)
        self.assertEqual(crc.function_id("sum_i32"), 0xA431FB55)
        self.assertEqual(crc.function_id(""), 0x811C9DC5)
        self.assertEqual(crc.function_id("rpc_increment"), fnv1a("rpc_increment"))

    def test_request_bytes(self):
        frame = crc.request("echo", b"abc", 7, 0x0102030405060708)
        self.assertEqual(frame.hex(), "52515543" "84d49dd4" "03000000" "07000000"
                                      "0807060504030201" "616263")
        self.assertEqual(crc.request(0xA431FB55, b"", 0xFFFFFFFF).hex(),
                         "52515543" "55fb31a4" "00000000" "ffffffff" "0000000000000000")
        forced = crc.request("echo", b"wxyz", 12, arg_len=40, magic=crc.TRUNCATED_MAGIC)
        self.assertEqual(forced[:12].hex(), "54515543" "84d49dd4" "28000000")
        self.assertEqual(len(forced), 28)

    def test_request_fields_out_of_range(self):
        with self.assertRaisesRegex(ValueError, r"^request_id 4294967296 does not fit 32 "
                                                r"unsigned bits$"):
            crc.request("echo", b"", 1 << 32)
        with self.assertRaisesRegex(ValueError, r"^ptp_timestamp -1 does not fit 64"):
            crc.request("echo", b"", 0, -1)

    def test_parse_request(self):
        r = crc.parse_request(bytes.fromhex("52515543" "84d49dd4" "02000000" "05000000"
                                            "0900000000000000" "6869"))
        self.assertEqual(r, crc.Request(0xD49DD484, 5, 9, b"hi"))
        with self.assertRaisesRegex(crc.ProtocolError, "claims 3 payload bytes but 2 follow"):
            crc.parse_request(bytes.fromhex("52515543" "84d49dd4" "03000000" "05000000"
                                            "0900000000000000" "6869"))

    def test_response_bytes_and_parse(self):
        frame = bytes.fromhex("53515543" "07000000" "03000000" "2a000000" "0100000000000000"
                              "626164")
        self.assertEqual(crc.response(7, b"bad", 42, 1), frame)
        self.assertEqual(crc.parse_response(frame), crc.Response(7, 42, 1, b"bad"))
        negative = bytes.fromhex("53515543" "fbffffff" "00000000" "01000000" "0000000000000000")
        self.assertEqual(crc.parse_response(negative).status, -5)

    def test_parse_response_refusals(self):
        good = crc.response(0, b"abcd", 3)
        cases = [
            (good[:23], "a response of 23 bytes is shorter than its 24-byte header"),
            (struct.pack("<I", 0x43555152) + good[4:],
             "response has magic 0x43555152, not 0x43555153 ('CUQS')"),
            (good[:-1], "response claims 4 result bytes but 3 follow its header"),
            (good + b"!", "response claims 4 result bytes but 5 follow its header"),
            (struct.pack("<IiIIQ", 0x43555153, -2, 1, 3, 0) + b"x",
             "response has protocol status -2 (payload too large) and 1 result bytes; protocol "
             "errors carry none"),
        ]
        for data, message in cases:
            with self.assertRaises(crc.ProtocolError) as e:
                crc.parse_response(data)
            self.assertEqual(str(e.exception), message)
            self.assertIsInstance(e.exception, ValueError)

    def test_status_names(self):
        names = {0: "ok", -1: "unknown function or bad magic", -2: "payload too large",
                 -3: "result too large", -4: "truncated", -5: "handler fault", -6: "bad length",
                 -7: "unknown protocol error", 3: "handler error"}
        for status, name in names.items():
            self.assertEqual(crc.status_name(status), name)
        self.assertEqual(crc.status_text(3), "handler error 3")
        self.assertEqual(crc.status_text(-4), "truncated")


# --- payloads and results -----------------------------------------------------------------------

def arg_error(spec, max_payload=payload.MAX_PAYLOAD):
    try:
        crc.encode_args([spec], max_payload)
    except ValueError as e:
        return str(e)
    raise AssertionError(f"{spec!r} was accepted")


class PayloadTest(unittest.TestCase):
    def test_every_type(self):
        cases = {
            "i8:-128,127,0x7f": "80" "7f" "7f",
            "i16:-2,+3": "feff" "0300",
            "i32:1,2,-3": "01000000" "02000000" "fdffffff",
            "i64:-9223372036854775808": "0000000000000080",
            "u8:255,0xFF,-0": "ff" "ff" "00",
            "u16:0xabcd": "cdab",
            "u32:4294967295": "ffffffff",
            "u64:0xffffffffffffffff": "ffffffffffffffff",
            "f32:1.5,-2,+0.25": "0000c03f" "000000c0" "0000803e",
            "f64:0.1": "9a9999999999b93f",
            "f32:inf,-inf,nan,-NaN": "0000807f" "000080ff" "0000c07f" "0000c0ff",
            "f64:-Infinity": "000000000000f0ff",
            "f32:1e-45": "01000000",  # the smallest subnormal is kept
            "f32:3.4028235e38": "ffff7f7f",
            "f32:.5,5.,5e-1,5E+0": "0000003f" "0000a040" "0000003f" "0000a040",
            "hex:0a0B": "0a0b",
            "hex:": "",
            "str:hi there": "6869207468657265",
            "str:": "",
            "str:a:b,c": "613a622c63",
        }
        for spec, expected in cases.items():
            self.assertEqual(crc.encode_args([spec]).hex(), expected, spec)
        self.assertEqual(crc.encode_args(["i32:1", "str:x", "hex:ff"]).hex(), "0100000078ff")

    def test_f32_is_rounded_once_from_the_decimal(self):
        # 1 + 2**-24 + 2**-60 lies just above the tie between 1 and 1 + 2**-23: binary64 rounds it
        # onto the tie, and rounding that again to binary32 would give 1 (ties to even).
        getcontext().prec = 100
        text = str(Decimal(1) + Decimal(2) ** -24 + Decimal(2) ** -60)
        self.assertEqual(crc.encode_args(["f32:" + text]).hex(), "0100803f")
        text = str(Decimal(1) + Decimal(2) ** -24 - Decimal(2) ** -60)
        self.assertEqual(crc.encode_args(["f32:" + text]).hex(), "0000803f")

    def test_refusals_word_for_word(self):
        cases = {
            "i32:99999999999": "argument 'i32:99999999999': 99999999999 is out of range for i32 "
                               "(-2147483648..2147483647)",
            "i8:0xff": "argument 'i8:0xff': 0xff is out of range for i8 (-128..127)",
            "u8:-1": "argument 'u8:-1': -1 is out of range for u8 (0..255)",
            "u64:18446744073709551616": "argument 'u64:18446744073709551616': "
                                        "18446744073709551616 is out of range for u64 "
                                        "(0..18446744073709551615)",
            "i64:" + "9" * 5000: "argument 'i64:" + "9" * 5000 + "': " + "9" * 5000 +
                                 " is out of range for i64 (-9223372036854775808.."
                                 "9223372036854775807)",
            "i32:": "argument 'i32:': no i32 value",
            "i32:1,,2": "argument 'i32:1,,2': element 2 is empty",
            "i32:1,": "argument 'i32:1,': element 2 is empty",
            "i32:x": "argument 'i32:x': 'x' is not an integer (decimal or 0x hex)",
            "i32:0x": "argument 'i32:0x': '0x' is not an integer (decimal or 0x hex)",
            "i32: 1": "argument 'i32: 1': ' 1' is not an integer (decimal or 0x hex)",
            "i32:1_000": "argument 'i32:1_000': '1_000' is not an integer (decimal or 0x hex)",
            "f32:1.5x": "argument 'f32:1.5x': '1.5x' is not a number (decimal, inf or nan)",
            "f32:0x1p3": "argument 'f32:0x1p3': '0x1p3' is not a number (decimal, inf or nan)",
            "f64:1_0": "argument 'f64:1_0': '1_0' is not a number (decimal, inf or nan)",
            "f32:+-1": "argument 'f32:+-1': '+-1' is not a number (decimal, inf or nan)",
            "f32:1e39": "argument 'f32:1e39': 1e39 is out of range for f32",
            "f32:1e-46": "argument 'f32:1e-46': 1e-46 is out of range for f32",
            "f64:1e999": "argument 'f64:1e999': 1e999 is out of range for f64",
            "f64:1e-400": "argument 'f64:1e-400': 1e-400 is out of range for f64",
            "hex:abc": "argument 'hex:abc': odd number of hex digits (3)",
            "hex:0g": "argument 'hex:0g': 'g' at offset 1 is not a hex digit",
            "bogus:1": "argument 'bogus:1': unknown type 'bogus' (expected i8, i16, i32, i64, u8, "
                       "u16, u32, u64, f32, f64, hex, str or @FILE)",
            "i32": "argument 'i32': expected TYPE:VALUE or @FILE",
            "@": "argument '@': no file name after '@'",
            "@/nonexistent/x": "argument '@/nonexistent/x': cannot open '/nonexistent/x': No "
                               "such file or directory",
            "@/dev/null": "argument '@/dev/null': '/dev/null' is not a regular file",
            "i32:a\nb": "argument 'i32:a\\nb': 'a\\nb' is not an integer (decimal or 0x hex)",
            "x'\x1b:1": "argument 'x\\'\\x1b:1': unknown type 'x\\'\\x1b' (expected i8, i16, "
                        "i32, i64, u8, u16, u32, u64, f32, f64, hex, str or @FILE)",
        }
        for spec, message in cases.items():
            self.assertEqual(arg_error(spec), message, spec)
        self.assertEqual(arg_error("hex:" + "00" * 11, 10),
                         "argument 'hex:" + "00" * 11 + "': the payload would be 11 bytes, over "
                         "the limit of 10")

    def test_files(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "table.bin")
            with open(path, "wb") as f:
                f.write(bytes(range(12)))
            self.assertEqual(crc.encode_args(["hex:ff", "@" + path]), b"\xff" + bytes(range(12)))
            self.assertEqual(arg_error("@" + path, 11),
                             f"argument '@{path}': '{path}' is 12 bytes; only 11 fit")
            self.assertEqual(arg_error(f"@{tmp}"), f"argument '@{tmp}': '{tmp}' is not a "
                                                   "regular file")
            fifo = os.path.join(tmp, "fifo")
            os.mkfifo(fifo)
            self.assertEqual(arg_error("@" + fifo), f"argument '@{fifo}': '{fifo}' is not a "
                                                    "regular file")

    def test_results(self):
        def decode(kind, data):
            return crc.decode_result(crc.parse_result_type(kind), data)
        f32 = lambda *v: struct.pack("<%df" % len(v), *v)  # noqa: E731
        f64 = lambda *v: struct.pack("<%dd" % len(v), *v)  # noqa: E731
        self.assertEqual(decode("hex", b"\x0a\xff"), "0aff")
        self.assertEqual(decode("str", b"a\\b\x01\x7f\xc3"), "a\\\\b\\x01\\x7f\\xc3")
        self.assertEqual(decode("raw", b"\x00\xff"), "\x00\xff")
        self.assertEqual(decode("i16", b"\xff\xff\x01\x00"), "-1,1")
        self.assertEqual(decode("u64", b"\xff" * 8), "18446744073709551615")
        self.assertEqual(decode("i8", b"\x80"), "-128")
        self.assertEqual(decode("f32", f32(0.1, 1.5, 16777216, 1e10, 3.4028234663852886e38)),
                         "0.1,1.5,16777216,1e+10,3.4028235e+38")
        self.assertEqual(decode("f32", f32(1e-45, -0.0, float("inf"), float("nan"))),
                         "1e-45,-0,inf,nan")
        self.assertEqual(decode("f64", f64(0.1, 1e20, 123456789012345680.0, 1e-07, 0.001, 100.0)),
                         "0.1,1e+20,123456789012345680,1e-07,0.001,100")
        self.assertEqual(decode("f64", f64(5e-324, 1.7976931348623157e308, -2.5)),
                         "5e-324,1.7976931348623157e+308,-2.5")
        with self.assertRaises(ValueError) as e:
            decode("i32", b"abcde")
        self.assertEqual(str(e.exception), "the result's 5 bytes are not a whole number of i32 "
                                           "values (4 bytes each)")
        with self.assertRaises(ValueError) as e:
            crc.parse_result_type("bogus")
        self.assertEqual(str(e.exception), "unknown result type 'bogus' (expected i8, i16, i32, "
                                           "i64, u8, u16, u32, u64, f32, f64, hex, str or raw)")

    def test_f32_results_read_back(self):
        for bits in (0x3DCCCCCD, 0x00000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0x4B800001,
                     0x3F800001, 0x5F000000, 0x2F800000):
            data = struct.pack("<I", bits)
            text = crc.decode_result(crc.ResultType("f32"), data)
            self.assertEqual(crc.encode_args(["f32:" + text]), data, text)


# --- the Client ---------------------------------------------------------------------------------

class ClientTest(ServerCase):
    def test_call(self):
        with crc.Client(self.server.address, 2.0) as c:
            first = c.call("echo", b"hello")
            self.assertEqual((first.status, first.result), (0, b"hello"))
            second = c.call("sum_i32", crc.encode_args(["i32:1,2,3,-10"]), ptp_timestamp=77)
            self.assertEqual(second.result, struct.pack("<q", -4))
            self.assertEqual((second.request_id, second.ptp_timestamp),
                             (first.request_id + 1, 77))
            self.assertEqual(c.call("fail").status, 7)
            unknown = c.call("nope", b"x")
            self.assertEqual((unknown.status, unknown.request_id, unknown.result),
                             (-1, first.request_id + 3, b""))
        self.assertEqual(c.sock.fileno(), -1)  # the context manager closed it

    def test_request_ids_and_frames_on_the_wire(self):
        before = len(self.server.received)
        with crc.Client(self.server.address, 2.0, first_request_id=0xFFFFFFFF) as c:
            c.call("echo", b"a", ptp_timestamp=5)
            c.call("echo", b"b", ptp_timestamp=6)
        got = self.server.received[before:]
        self.assertEqual(got, [bytes.fromhex("52515543" "84d49dd4" "01000000" "ffffffff"
                                             "0500000000000000" "61"),
                               bytes.fromhex("52515543" "84d49dd4" "01000000" "00000000"
                                             "0600000000000000" "62")])

    def test_timeouts_raise_and_leave_the_socket_alone(self):
        with crc.Client(self.server.address, 3.0) as c:
            t0 = time.monotonic()
            with self.assertRaises(crc.NoAnswerError) as e:
                c.call("drop", b"", timeout=0.2)
            self.assertLess(time.monotonic() - t0, 2.0)
            self.assertIsInstance(e.exception, TimeoutError)
            self.assertRegex(str(e.exception), r"^no answer to request_id \d+ within 0.2 s$")
            self.assertEqual(c.sock.gettimeout(), 3.0)
            with self.assertRaises(TimeoutError):
                c.receive(0.1)
            self.assertEqual(c.sock.gettimeout(), 3.0)
            self.assertEqual(c.call("echo", b"after").result, b"after")

    def test_receive(self):
        with crc.Client(self.server.address, 2.0) as c:
            c.send(crc.request("echo", b"raw", 99, 3))
            self.assertEqual(c.receive(), crc.Response(0, 99, 3, b"raw"))
            c.send(crc.request("echo", b"wxyz", 12, arg_len=40))
            self.assertEqual(c.receive(1.0), crc.Response(-4, 12, 0, b""))
            c.send(crc.request("echo", b"wxyz", 13, magic=0x12345678))
            self.assertEqual(c.receive().status, -1)

    def test_call_skips_answers_to_other_requests(self):
        with crc.Client(self.server.address, 2.0) as c:
            self.assertEqual(c.call("stale").result, b"new")

    def test_a_datagram_that_is_no_response(self):
        with crc.Client(self.server.address, 2.0) as c:
            with self.assertRaisesRegex(crc.ProtocolError, "^response has magic 0x42524147"):
                c.call("garbage")

    def test_addresses(self):
        for text in ("nope", "host:", ":80", "host:0", "host:65536", "host:x"):
            with self.assertRaises(ValueError) as e:
                crc.parse_address(text)
            self.assertEqual(str(e.exception), f"'{text}' is not HOST:PORT (a port from 1 to "
                                               "65535)")
        self.assertEqual(crc.parse_address("[::1]:5000"), ("::1", 5000))
        self.assertEqual(crc.parse_address("localhost:1"), ("localhost", 1))


class BenchTest(ServerCase):
    def test_everything_answered(self):
        with crc.Client(self.server.address, 2.0) as c:
            r = crc.bench(c, 500, 8)
        self.assertEqual((r.sent, r.answered, r.wrong, r.lost), (500, 500, 0, 0))
        self.assertEqual(len(r.latencies_us), 500)
        l = r.latency_us()
        self.assertTrue(0 < l["min"] <= l["p50"] <= l["p90"] <= l["p99"] <= l["p99.9"]
                        <= l["max"], l)
        self.assertGreater(r.requests_per_s, 0)

    def test_wrong_answers_are_counted(self):
        self.server.mangle = True
        with crc.Client(self.server.address, 2.0) as c:
            # Each payload is 8 tag bytes and the request's number (little-endian), so requests
            # 0, 5, ..., 95 are answered wrong.
            r = crc.bench(c, 100, 4)
            self.assertEqual((r.sent, r.answered, r.wrong, r.lost), (100, 80, 20, 0))
            self.assertEqual(len(r.latencies_us), 80)
            r = crc.bench(c, 10, 2, payload=bytes(8) + b"\x01")
            self.assertEqual((r.answered, r.wrong), (10, 0))
            r = crc.bench(c, 10, 2, payload=bytes(8) + b"\x05")
            self.assertEqual((r.answered, r.wrong), (0, 10))

    def test_lost_requests(self):
        with crc.Client(self.server.address, 0.3) as c:
            r = crc.bench(c, 20, 4, handler="drop")
        self.assertEqual((r.sent, r.answered, r.wrong, r.lost), (4, 0, 0, 4))

    def test_a_server_that_goes_away_loses_what_is_pending(self):
        # A port nobody listens on: a send or receive finds it refused (ICMP port unreachable),
        # as a load test does when the server stops under it. The requests sent are lost, and
        # bench returns instead of raising.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            address = "127.0.0.1:%d" % s.getsockname()[1]
        with crc.Client(address, 2.0) as c:
            t0 = time.monotonic()
            r = crc.bench(c, 20, 4)
        # How many went out before the refusal came back depends on when the kernel reports it.
        self.assertGreaterEqual(r.sent, 1)
        self.assertEqual((r.answered, r.wrong, r.lost), (0, 0, r.sent))
        self.assertTrue(r.refused)
        self.assertLess(time.monotonic() - t0, 1.5)  # refused at once, not after the timeout

    def test_other_handlers(self):
        with crc.Client(self.server.address, 2.0) as c:
            r = crc.bench(c, 50, 5, handler="sum_i32", payload=crc.encode_args(["i32:1,2"]))
            self.assertEqual((r.answered, r.payload_bytes), (50, 8))
            r = crc.bench(c, 10, 1, handler="fail")
            self.assertEqual((r.answered, r.wrong), (0, 10))

    def test_percentiles_are_nearest_rank(self):
        values = [float(v) for v in range(1, 1001)]
        self.assertEqual([crc.percentile(values, p) for p in (50, 90, 99, 99.9, 100)],
                         [500.0, 900.0, 990.0, 999.0, 1000.0])
        self.assertEqual(crc.percentile([1.0, 2.0], 50), 1.0)
        self.assertEqual(crc.percentile([3.0], 99.9), 3.0)
        self.assertEqual(crc.percentile([], 50), 0.0)


# --- the command --------------------------------------------------------------------------------

def run_module(*args, timeout=60):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    return subprocess.run([sys.executable, "-m", "cudaq_rt_client", *args], capture_output=True,
                          env=env, timeout=timeout)


def run_launcher(*args, timeout=60):
    return subprocess.run([sys.executable, LAUNCHER, *args], capture_output=True, timeout=timeout)


class CommandTest(ServerCase):
    def run_both(self, *args):
        """Runs the command both ways; they must agree. The first run's result, as text."""
        a, b = run_module(*args), run_launcher(*args)
        self.assertEqual(a.returncode, b.returncode, (a.stderr, b.stderr))
        return subprocess.CompletedProcess(a.args, a.returncode, a.stdout.decode(),
                                           a.stderr.decode())

    def expect(self, args, status, stdout, stderr=""):
        r = self.run_both(self.server.address, *args)
        self.assertEqual((r.returncode, r.stdout, r.stderr), (status, stdout, stderr), args)

    def expect_error(self, args, status, message, address=True):
        r = self.run_both(*((self.server.address,) if address else ()), *args)
        self.assertEqual(r.returncode, status, r.stdout + r.stderr)
        self.assertEqual(r.stderr, f"cudaq-rt-client: error: {message}\n", args)
        self.assertNotIn("Traceback", r.stdout + r.stderr)

    def test_calls(self):
        self.expect(["--call", "echo", "--arg", "str:hello"], 0, "ok: 68656c6c6f\n")
        self.expect(["--call", "echo", "--arg", "str:hi", "--result", "str"], 0, "ok: hi\n")
        self.expect(["--call", "sum_i32", "--arg", "i32:1,2", "--i32", "3", "--result", "i64"],
                    0, "ok: 6\n")
        # The older payload options add to the payload in order; nothing is dropped.
        self.expect(["--call", "echo", "--i32", "1", "--text", "x", "--arg", "u8:2"], 0,
                    "ok: 010000007802\n")
        self.expect(["--call", "echo"], 0, "ok\n")
        self.expect(["--call", "nope"], 4, "unknown function or bad magic\n")
        self.expect(["--call", "fail", "--result", "str"], 3, "handler error 7: bad\n")
        self.expect(["--call", "echo", "--arg", "hex:0102", "--result", "i32"], 2,
                    "ok: (the result's 2 bytes are not a whole number of i32 values (4 bytes "
                    "each))\n")

    def test_raw(self):
        frame = crc.request("echo", b"abc", 99).hex()
        self.expect(["--raw", frame, "--result", "str"], 0, "ok: abc\n")
        self.expect(["--raw", frame[:40]], 4, "truncated\n")
        r = self.run_both(self.server.address, "--raw", frame, "--json")
        doc = json.loads(r.stdout)
        self.assertEqual((doc["sent_hex"], doc["request_id"], doc["result_hex"],
                          doc["exit_status"]), (frame, 99, "616263", 0))

    def test_raw_result_goes_to_stdout_as_bytes(self):
        r = run_module(self.server.address, "--call", "echo", "--arg", "hex:00ff0a",
                       "--result", "raw")
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, b"\x00\xff\x0a", b"ok\n"))

    def test_json(self):
        r = self.run_both(self.server.address, "--call", "sum_i32", "--arg", "i32:4,5",
                          "--result", "i64", "--json")
        doc = json.loads(r.stdout)
        self.assertEqual(r.returncode, 0)
        self.assertEqual(set(doc), {"format_version", "address", "handler", "request_id", "status",
                                    "status_name", "result_hex", "result", "latency_us",
                                    "exit_status"})
        self.assertEqual((doc["address"], doc["handler"], doc["status"], doc["status_name"],
                          doc["result_hex"], doc["result"], doc["exit_status"]),
                         (self.server.address, "sum_i32", 0, "ok", "0900000000000000", "9", 0))
        self.assertGreater(doc["latency_us"], 0)
        r = self.run_both(self.server.address, "--call", "drop", "--timeout", "0.2", "--json")
        doc = json.loads(r.stdout)
        self.assertEqual((r.returncode, doc["exit_status"]), (1, 1))
        self.assertRegex(doc["error"], r"^no answer to request_id 1 within 0.2 s$")
        r = self.run_both(self.server.address, "--call", "echo", "--arg", "i8:128", "--json")
        doc = json.loads(r.stdout)
        self.assertEqual((r.returncode, doc["exit_status"], doc["error"]),
                         (2, 2, "argument 'i8:128': 128 is out of range for i8 (-128..127)"))

    def test_json_documents_follow_their_schema(self):
        try:
            import jsonschema
        except ImportError:
            self.skipTest("no jsonschema module (Debian: python3-jsonschema)")
        with open(os.path.join(ROOT, "schemas", "client.schema.json")) as f:
            schema = json.load(f)
        validator = jsonschema.validators.validator_for(schema)(schema)
        runs = [
            ["--call", "echo", "--arg", "str:hi", "--result", "str", "--json"],
            ["--call", "echo", "--arg", "hex:01", "--result", "i32", "--json"],
            ["--call", "fail", "--json"],
            ["--raw", crc.request("echo", b"x", 5).hex(), "--json"],
            ["--bench", "20", "--inflight", "4", "--json"],
            ["--bench", "2", "--call", "drop", "--timeout", "0.2", "--json"],
            ["--call", "drop", "--timeout", "0.2", "--json"],
            ["--call", "echo", "--arg", "u8:256", "--json"],
        ]
        for args in runs:
            r = run_module(self.server.address, *args)
            doc = json.loads(r.stdout)
            self.assertEqual((doc["format_version"], doc["exit_status"]), (1, r.returncode), args)
            errors = [e.message for e in validator.iter_errors(doc)]
            self.assertEqual(errors, [], (args, doc))
        # ...and the schema does refuse what the command must not print.
        doc["exit_status"] = 0
        self.assertTrue(list(validator.iter_errors(doc)))
        doc = json.loads(run_module(self.server.address, *runs[0]).stdout)
        del doc["status_name"]
        self.assertTrue(list(validator.iter_errors(doc)))

    def test_failures(self):
        self.expect_error(["--call", "drop", "--timeout", "0.2"], 1,
                          "no answer to request_id 1 within 0.2 s")
        self.expect_error(["--raw", crc.request("drop").hex(), "--timeout", "0.2"], 1,
                          "no answer within 0.2 s")
        self.expect_error(["--call", "garbage"], 1,
                          "response has magic 0x42524147, not 0x43555153 ('CUQS')")

    def test_refused_connection(self):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            closed = "127.0.0.1:%d" % s.getsockname()[1]
        self.expect_error([closed, "--call", "echo"], 1, f"{closed}: Connection refused",
                          address=False)

    def test_usage_errors(self):
        with_address = [
            (["--result", "bogus", "--call", "echo"],
             "--result: unknown result type 'bogus' (expected i8, i16, i32, i64, u8, u16, u32, "
             "u64, f32, f64, hex, str or raw)"),
            (["--call", "echo", "--i32", "99999999999"],
             "argument 'i32:99999999999': 99999999999 is out of range for i32 "
             "(-2147483648..2147483647)"),
            (["--call", "echo", "--arg", "i32"], "argument 'i32': expected TYPE:VALUE or @FILE"),
            ([], "nothing to do: give --call NAME, --raw HEX or --bench N"),
            (["--bench", "3", "--arg", "i32:1"], "--arg needs --call"),
            (["--raw", "zz"], "--raw: 'z' at offset 0 is not a hex digit"),
            (["--raw", "00", "--call", "echo"],
             "--raw sends its bytes alone: not with --call, --arg or --bench"),
            (["--bench", "0"], "--bench: the number of requests must be at least 1"),
            (["--bench", "x"], "argument --bench: invalid int value: 'x'"),
            (["--bench", "5", "--inflight", "0"], "--inflight: must be at least 1"),
            (["--call", "echo", "--inflight", "2"], "--inflight needs --bench"),
            (["--bench", "5", "--result", "i32"],
             "--result goes with --call or --raw, not --bench"),
            (["--call", "echo", "--timeout", "0"], "--timeout: must be more than 0 seconds"),
            (["--call", "echo", "--timeout", "nan"], "--timeout: must be more than 0 seconds"),
            (["--call", "echo", "--timeout", "inf"], "--timeout: must be at most 1000000 seconds"),
            (["--call", "echo", "--result", "raw", "--json"],
             "--result raw writes bytes to stdout: not with --json"),
            (["--call", "echo", "--bogus"], "unrecognized arguments: --bogus"),
            (["--call", "echo", "--res", "i32"], "unrecognized arguments: --res i32"),
            (["--call", "echo", "--arg", "str:a\nb", "--oops\n"],
             "unrecognized arguments: --oops\\n"),
        ]
        for args, message in with_address:
            self.expect_error(args, 2, message)
        self.expect_error(["--call", "echo"], 2, "the following arguments are required: address",
                          address=False)
        self.expect_error(["nope", "--call", "echo"], 2,
                          "'nope' is not HOST:PORT (a port from 1 to 65535)", address=False)

    def test_version_and_help(self):
        with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
            project_version = re.search(r"project\(cudaq_rt VERSION (\d+\.\d+\.\d+)",
                                        f.read()).group(1)
        self.assertEqual(crc.__version__, project_version)
        r = self.run_both("--version")
        self.assertEqual(r.returncode, 0)
        self.assertRegex(r.stdout, r"^cudaq-rt-client %s \(Python \d+\.\d+\.\d+\S*\)\n$"
                         % re.escape(project_version))
        r = self.run_both("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("See cudaq-rt-client(1).", r.stdout)
        for option in ("--call", "--arg", "--raw", "--bench", "--inflight", "--result",
                       "--timeout", "--json", "--version"):
            self.assertIn(option, r.stdout)

    def test_bench(self):
        r = self.run_both(self.server.address, "--bench", "300", "--inflight", "8")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout,
                         r"^echo: 300 requests of 16 bytes, 8 in flight: 300 answered, 0 wrong, "
                         r"0 lost\n"
                         r"latency us: min [\d.]+  mean [\d.]+  p50 [\d.]+  p90 [\d.]+  "
                         r"p99 [\d.]+  p99\.9 [\d.]+  max [\d.]+\n"
                         r"throughput: \d+ requests/s\n$")
        r = self.run_both(self.server.address, "--bench", "200", "--inflight", "4", "--call",
                          "sum_i32", "--arg", "i32:1,2,3", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(set(doc), {"format_version", "address", "bench", "exit_status"})
        b = doc["bench"]
        self.assertEqual(set(b), {"handler", "payload_bytes", "requests", "inflight", "answered",
                                  "wrong", "lost", "seconds", "requests_per_s", "latency_us"})
        self.assertEqual(set(b["latency_us"]), {"min", "mean", "p50", "p90", "p99", "p99.9",
                                                "max"})
        self.assertEqual((b["handler"], b["payload_bytes"], b["requests"], b["inflight"],
                          b["answered"], b["wrong"], b["lost"]),
                         ("sum_i32", 12, 200, 4, 200, 0, 0))
        self.assertGreater(b["requests_per_s"], 0)
        r = self.run_both(self.server.address, "--bench", "10", "--inflight", "2", "--call",
                          "drop", "--timeout", "0.2", "--json")
        doc = json.loads(r.stdout)
        self.assertEqual((r.returncode, doc["exit_status"], doc["bench"]["lost"]), (1, 1, 2))


# --- installing ---------------------------------------------------------------------------------

def build_python():
    """An interpreter that can build a wheel offline (setuptools, and wheel where setuptools has
    no bdist_wheel of its own): this one, else the system's; None if neither can."""
    for python in dict.fromkeys([sys.executable, "/usr/bin/python3"]):
        if os.access(python, os.X_OK) and subprocess.run(
                [python, "-c", "import setuptools\ntry:\n import setuptools.command.bdist_wheel\n"
                 "except ImportError:\n import wheel"], capture_output=True).returncode == 0:
            return python
    return None


class InstallTest(ServerCase):
    def test_pip_install_gives_the_command(self):
        python = build_python()
        self.assertIsNotNone(python, "no python3 here can build a wheel offline: install "
                                     "python3-setuptools and python3-wheel (scripts/setup.sh)")
        with tempfile.TemporaryDirectory() as tmp:
            source = os.path.join(tmp, "src")
            shutil.copytree(PYTHON_DIR, source,
                            ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
            venv = os.path.join(tmp, "venv")
            # The system's setuptools and wheel build it; pip is the venv's own (ensurepip).
            r = subprocess.run([python, "-m", "venv", "--system-site-packages", venv],
                               capture_output=True, text=True, timeout=300)
            if r.returncode != 0 and "ensurepip" in r.stdout + r.stderr:
                self.skipTest(f"{python} -m venv has no ensurepip (Debian: python3-venv)")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            r = subprocess.run([os.path.join(venv, "bin", "python"), "-m", "pip", "install",
                                "--no-index", "--no-build-isolation", source],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            command = os.path.join(venv, "bin", "cudaq-rt-client")
            r = subprocess.run([command, "--version"], capture_output=True, text=True,
                               cwd=tmp, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stdout, r"^cudaq-rt-client %s " % re.escape(crc.__version__))
            r = subprocess.run([command, self.server.address, "--call", "echo", "--arg",
                                "str:installed"], capture_output=True, text=True, cwd=tmp,
                               timeout=60)
            self.assertEqual((r.returncode, r.stdout), (0, "ok: 696e7374616c6c6564\n"), r.stderr)
            # Installed, not run from the tree: the module and its type marker are the venv's.
            r = subprocess.run([os.path.join(venv, "bin", "python"), "-c",
                                "import cudaq_rt_client, os; d = os.path.dirname("
                                "cudaq_rt_client.__file__); print(d); "
                                "print(os.path.exists(os.path.join(d, 'py.typed')))"],
                               capture_output=True, text=True, cwd=tmp, timeout=60)
            where, typed = r.stdout.split()
            self.assertTrue(where.startswith(venv), where)
            self.assertEqual(typed, "True")

    def test_launcher_in_an_installed_tree(self):
        # The layout cmake/Install.cmake makes: bin/cudaq-rt-client, lib/cudaq-rt/python/.
        with tempfile.TemporaryDirectory() as prefix:
            os.makedirs(os.path.join(prefix, "bin"))
            command = os.path.join(prefix, "bin", "cudaq-rt-client")
            shutil.copy(LAUNCHER, command)
            shutil.copytree(os.path.join(PYTHON_DIR, "cudaq_rt_client"),
                            os.path.join(prefix, "lib", "cudaq-rt", "python", "cudaq_rt_client"),
                            ignore=shutil.ignore_patterns("__pycache__"))
            r = subprocess.run([sys.executable, command, self.server.address, "--call", "echo",
                                "--arg", "u16:258", "--json"], capture_output=True, text=True,
                               cwd=prefix, env=dict(os.environ, PYTHONPATH=""), timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(json.loads(r.stdout)["result_hex"], "0201")


if __name__ == "__main__":
    unittest.main()
