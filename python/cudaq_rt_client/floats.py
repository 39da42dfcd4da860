"""Floats as C++'s std::from_chars and std::to_chars read and write them, for binary32 (f32) and
binary64 (f64): cudaq-rt-run parses --arg values and prints results with them, and this client
must give the same bytes and the same text.

Reading: decimal only (no hex floats), the whole text, '-' allowed, 'inf', 'infinity' and 'nan'
(any case, 'nan(chars)' too); the value correctly rounded, ties to even, once, from the decimal.
A value that rounds to infinity, or a non-zero value that rounds to zero, is out of range;
subnormals are kept. Python's float() rounds to binary64 correctly; binary32 needs more care:
rounding the decimal to binary64 and then to binary32 can differ from rounding it once, exactly
where binary64 lands on a tie between two binary32 values, and there the decimal decides.

Writing: the fewest significant digits that read back to the same value (of those, the closest),
in fixed or scientific notation, whichever is shorter (fixed on a tie): 0.1, 1e+20, 1e-07,
123456789012345680, 3.4028235e+38; inf, -inf, nan, -nan, -0.
"""
from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction

_SYNTAX = re.compile(r"-?(?:(?P<mantissa>[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
                     r"|(?P<inf>inf(?:inity)?)|(?P<nan>nan(?:\([0-9A-Za-z_]*\))?))",
                     re.IGNORECASE)


def _binary32_scaled(magnitude: Fraction) -> tuple[Fraction, int]:
    """`magnitude` (> 0) in units of the binary32 quantum at its exponent, and that quantum's
    exponent: 24 significant bits, subnormals below 2**-126."""
    exponent = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()
    if Fraction(2) ** exponent > magnitude:
        exponent -= 1
    quantum = max(exponent - 23, -149)
    return magnitude / Fraction(2) ** quantum, quantum


def round_to_binary32(exact: Fraction) -> float | None:
    """`exact` rounded to the nearest binary32, ties to even, as a float; None when it overflows."""
    if exact == 0:
        return 0.0
    scaled, quantum = _binary32_scaled(abs(exact))
    if quantum > 127 - 23:  # 2**128 or more before rounding
        return None
    value = math.ldexp(round(scaled), quantum)
    if value >= 2.0 ** 128:
        return None
    return math.copysign(value, exact)


def from_chars(text: str, size: int) -> float | None:
    """The value of `text` as a binary32 (size 4) or binary64 (size 8), as a Python float; None
    when it is out of range; ValueError when `text` is not a number."""
    m = _SYNTAX.fullmatch(text)
    if not m:
        raise ValueError(f"{text!r} is not a number")
    negative = text.startswith("-")
    if m.group("nan"):
        return -math.nan if negative else math.nan
    if m.group("inf"):
        return -math.inf if negative else math.inf
    nonzero = any(c in "123456789" for c in m.group("mantissa"))
    value = float(text)
    if math.isinf(value) or (nonzero and value == 0.0):
        return None
    if size == 8:
        return value
    exact = Fraction(value)
    if value != 0 and _binary32_scaled(abs(exact))[0].denominator == 2:
        exact = Fraction(Decimal(text))
    narrowed = round_to_binary32(exact)
    if narrowed is None or (nonzero and narrowed == 0.0):
        return None
    return narrowed


def _shortest_digits(value: float, size: int) -> tuple[str, int]:
    """The significant digits to write for `value` (finite, > 0), and the decimal exponent of the
    first one."""
    if size == 8:  # repr() is the shortest round trip of a binary64
        _, digits, exponent = Decimal(repr(value)).as_tuple()
        return "".join(map(str, digits)).rstrip("0") or "0", len(digits) + int(exponent) - 1
    exact = Fraction(value)
    for precision in range(1, 10):  # 9 digits always read back to the same binary32
        mantissa, _, exp = f"{value:.{precision - 1}e}".partition("e")
        nearest = int(mantissa.replace(".", ""))
        scale = int(exp) - precision + 1
        # The nearest decimal of this length may fall outside the rounding interval where that
        # is lopsided (at a power of 2) while its neighbour falls inside.
        fits = [(abs(Fraction(units) * Fraction(10) ** scale - exact), units)
                for units in (nearest - 1, nearest, nearest + 1)
                if units > 0 and round_to_binary32(Fraction(units) * Fraction(10) ** scale)
                == value]
        if fits:
            text = str(min(fits)[1])
            return text.rstrip("0") or "0", scale + len(text) - 1
    raise AssertionError(f"no 9-digit form of {value!r} reads back")


def to_chars(value: float, size: int) -> str:
    """`value`, a binary32 (size 4) or binary64 (size 8), as std::to_chars writes it."""
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if math.isnan(value):
        return sign + "nan"
    if math.isinf(value):
        return sign + "inf"
    if value == 0:
        return sign + "0"
    digits, exponent = _shortest_digits(abs(value), size)
    scientific = (digits[0] + ("." + digits[1:] if len(digits) > 1 else "") +
                  f"e{'-' if exponent < 0 else '+'}{abs(exponent):02d}")
    if exponent < 0:
        fixed = "0." + "0" * (-exponent - 1) + digits
    elif len(digits) <= exponent + 1:
        fixed = digits + "0" * (exponent + 1 - len(digits))
    else:
        fixed = digits[:exponent + 1] + "." + digits[exponent + 1:]
    return sign + (fixed if len(fixed) <= len(scientific) else scientific)
