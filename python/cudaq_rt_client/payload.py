"""Typed values on the command line and results printed back, in the syntax of cudaq-rt-run's
--arg and --result (runtime/src/command/request_args.cpp, cudaq-rt-run(1)); errors word for word.

A payload is its arguments' bytes, concatenated in order, with no padding or length fields;
numbers are little-endian. An argument is one of:

  TYPE:V[,V...]  TYPE is i8 i16 i32 i64 u8 u16 u32 u64 f32 f64; several values make an array, with
                 no spaces and no empty elements. Integers are decimal or 0x hex with an optional
                 sign ('-' for the signed types only), and a value is a number, not a bit pattern:
                 i8:0xff is out of range. Floats are decimal as strtod reads them in the C locale
                 (no hex floats), read whole; inf, -inf and nan are accepted; a value too large for
                 the type, or so small that it rounds to zero, is out of range (subnormals are
                 kept).
  hex:HEX        raw bytes, an even number of hex digits, either case.
  str:TEXT       the bytes of TEXT (UTF-8), no NUL added.
  @PATH          the bytes of a regular file, no larger than the room left in the payload.

A result prints as an array of a numeric TYPE (its size must be a whole number of elements), as
hex (lowercase), str (printable ASCII as is, '\\\\' for a backslash, '\\xNN' for any other byte) or
raw (the bytes unchanged). Floats are read and written as C++'s std::from_chars and
std::to_chars do (floats.py).
"""
from __future__ import annotations

import os
import re
import stat
import struct
from dataclasses import dataclass
from typing import Iterable

from .floats import from_chars, to_chars

# The most payload bytes one UDP datagram over IPv4 carries after the 24-byte header.
MAX_PAYLOAD = 65507 - 24


@dataclass(frozen=True)
class Scalar:
    name: str
    size: int
    is_signed: bool
    is_float: bool

    @property
    def format(self) -> str:
        codes = {(1, True): "b", (2, True): "h", (4, True): "i", (8, True): "q",
                 (1, False): "B", (2, False): "H", (4, False): "I", (8, False): "Q"}
        if self.is_float:
            return "<f" if self.size == 4 else "<d"
        return "<" + codes[(self.size, self.is_signed)]

    @property
    def max(self) -> int:
        return (1 << (self.size * 8 - (1 if self.is_signed else 0))) - 1

    @property
    def min_magnitude(self) -> int:
        return self.max + 1 if self.is_signed else 0

    @property
    def range_text(self) -> str:
        return f"-{self.min_magnitude}..{self.max}" if self.is_signed else f"0..{self.max}"


SCALARS = {s.name: s for s in (
    Scalar("i8", 1, True, False), Scalar("i16", 2, True, False),
    Scalar("i32", 4, True, False), Scalar("i64", 8, True, False),
    Scalar("u8", 1, False, False), Scalar("u16", 2, False, False),
    Scalar("u32", 4, False, False), Scalar("u64", 8, False, False),
    Scalar("f32", 4, True, True), Scalar("f64", 8, True, True))}

RESULT_KINDS = ("hex", "str", "raw")


def escape(text: str, quote_char: str = "") -> str:
    """What the user wrote, safe to print on one line: printable ASCII and other printable
    characters as they are; a backslash (and `quote_char`) escaped with a backslash; \\n, \\r, \\t;
    \\xHH for every other control character (C1 ones byte by byte, as their UTF-8) and for bytes
    that are not UTF-8 (surrogate escapes from the command line)."""
    out = []
    for c in text:
        o = ord(c)
        if c == "\\" or (quote_char and c == quote_char):
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif 0x80 <= o < 0xA0:
            out.append("".join(f"\\x{b:02x}" for b in c.encode()))
        elif 0xDC80 <= o <= 0xDCFF:  # a byte os.fsdecode could not decode
            out.append(f"\\x{o - 0xDC00:02x}")
        elif 0xD800 <= o <= 0xDFFF:
            out.append("".join(f"\\x{b:02x}" for b in c.encode("utf-8", "surrogatepass")))
        else:
            out.append(c)
    return "".join(out)


def quoted(text: str) -> str:
    return "'" + escape(text, "'") + "'"


def _text_bytes(text: str) -> bytes:
    """The bytes of a command-line word: undecodable bytes come back as they were given."""
    return text.encode("utf-8", "surrogateescape")


# Integer syntax after the sign is stripped; from_chars reads decimal digits or, after a 0x prefix
# with at least one character after it, hex digits.
_DECIMAL = re.compile(r"[0-9]+")
_HEX = re.compile(r"[0-9a-fA-F]+")


def _encode_integer(text: str, t: Scalar) -> bytes:
    digits, negative = text, False
    if digits[:1] in ("-", "+"):
        negative = digits[0] == "-"
        digits = digits[1:]
    base, pattern = 10, _DECIMAL
    if len(digits) > 2 and digits[0] == "0" and digits[1] in "xX":
        base, pattern, digits = 16, _HEX, digits[2:]
    if not pattern.fullmatch(digits):
        raise ValueError(f"{quoted(text)} is not an integer (decimal or 0x hex)")
    significant = digits.lstrip("0")
    # Past 20 significant digits no value fits 64 bits (and int() would refuse thousands).
    magnitude = int(significant, base) if 0 < len(significant) <= 20 else (
        0 if not significant else 1 << 64)
    if magnitude > (t.min_magnitude if negative else t.max):
        raise ValueError(f"{text} is out of range for {t.name} ({t.range_text})")
    return struct.pack(t.format, -magnitude if negative else magnitude)


def _encode_float(text: str, t: Scalar) -> bytes:
    number = text
    # from_chars refuses a leading '+'; strtod, whose syntax this follows, takes one.
    if len(number) > 1 and number[0] == "+" and number[1] != "-":
        number = number[1:]
    try:
        value = from_chars(number, t.size)
    except ValueError:
        raise ValueError(f"{quoted(text)} is not a number (decimal, inf or nan)") from None
    if value is None:
        raise ValueError(f"{text} is out of range for {t.name}")
    return struct.pack(t.format, value)


def _encode_scalars(values: str, t: Scalar) -> bytes:
    if not values:
        raise ValueError(f"no {t.name} value")
    out = bytearray()
    for index, element in enumerate(values.split(","), 1):
        if not element:
            raise ValueError(f"element {index} is empty")
        out += _encode_float(element, t) if t.is_float else _encode_integer(element, t)
    return bytes(out)


def parse_hex(digits: str) -> bytes:
    """The bytes of an even number of hex digits, either case; ValueError otherwise."""
    if len(digits) % 2:
        raise ValueError(f"odd number of hex digits ({len(digits)})")
    for offset, c in enumerate(digits):
        if c not in "0123456789abcdefABCDEF":
            raise ValueError(f"{quoted(c)} at offset {offset} is not a hex digit")
    return bytes.fromhex(digits)


def _read_file(path: str, room: int) -> bytes:
    if not path:
        raise ValueError("no file name after '@'")
    try:
        # O_NONBLOCK: opening a FIFO would otherwise wait for a writer before fstat could tell.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ValueError(f"cannot open {quoted(path)}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{quoted(path)} is not a regular file")
        if st.st_size > room:
            raise ValueError(f"{quoted(path)} is {st.st_size} bytes; only {room} fit")
        data = b""
        while len(data) < st.st_size + 1:  # one more: a file that grew meanwhile is caught
            try:
                chunk = os.read(fd, st.st_size + 1 - len(data))
            except OSError as e:
                raise ValueError(f"cannot read {quoted(path)}: {e.strerror}") from None
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) != st.st_size:
        raise ValueError(f"{quoted(path)} changed size while it was read")
    return data


def _encode_value(spec: str, already: int, max_payload: int) -> bytes:
    if already > max_payload:
        raise ValueError(f"the payload is already {already} bytes, over the limit of "
                         f"{max_payload}")
    if spec.startswith("@"):
        return _read_file(spec[1:], max_payload - already)
    kind, colon, value = spec.partition(":")
    if not colon:
        raise ValueError("expected TYPE:VALUE or @FILE")
    if kind == "hex":
        data = parse_hex(value)
    elif kind == "str":
        data = _text_bytes(value)
    elif kind in SCALARS:
        data = _encode_scalars(value, SCALARS[kind])
    else:
        raise ValueError(f"unknown type {quoted(kind)} (expected i8, i16, i32, i64, u8, u16, u32, "
                         "u64, f32, f64, hex, str or @FILE)")
    if already + len(data) > max_payload:
        raise ValueError(f"the payload would be {already + len(data)} bytes, over the limit of "
                         f"{max_payload}")
    return data


def encode_arg(spec: str, already: int = 0, max_payload: int = MAX_PAYLOAD) -> bytes:
    """The bytes of one argument, for a payload that holds `already` bytes before it. ValueError
    with one line, `argument 'SPEC': ...`, on a bad spec or a payload past `max_payload`."""
    try:
        return _encode_value(spec, already, max_payload)
    except ValueError as e:
        raise ValueError(f"argument {quoted(spec)}: {e}") from None


def encode_args(specs: Iterable[str], max_payload: int = MAX_PAYLOAD) -> bytes:
    """A request's payload: every argument's bytes in order."""
    payload = bytearray()
    for spec in specs:
        payload += encode_arg(spec, len(payload), max_payload)
    return bytes(payload)


@dataclass(frozen=True)
class ResultType:
    """How a result is printed: `kind` is 'hex', 'str', 'raw' or a scalar type's name."""
    kind: str = "hex"


def parse_result_type(name: str) -> ResultType:
    if name in RESULT_KINDS or name in SCALARS:
        return ResultType(name)
    raise ValueError(f"unknown result type {quoted(name)} (expected i8, i16, i32, i64, u8, u16, "
                     "u32, u64, f32, f64, hex, str or raw)")


def _str_text(result: bytes) -> str:
    out = []
    for b in result:
        if b == 0x5C:
            out.append("\\\\")
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append(f"\\x{b:02x}")
    return "".join(out)


def decode_result(kind: ResultType, result: bytes) -> str:
    """The result as text ('raw': the bytes as latin-1 text; write them with .encode('latin-1')).
    ValueError when the size is not a whole number of the type's elements."""
    if kind.kind == "hex":
        return result.hex()
    if kind.kind == "str":
        return _str_text(result)
    if kind.kind == "raw":
        return result.decode("latin-1")
    t = SCALARS[kind.kind]
    if len(result) % t.size:
        raise ValueError(f"the result's {len(result)} bytes are not a whole number of {t.name} "
                         f"values ({t.size} bytes each)")
    values = [v for (v,) in struct.iter_unpack(t.format, result)]
    if t.is_float:
        return ",".join(to_chars(v, t.size) for v in values)
    return ",".join(str(v) for v in values)
