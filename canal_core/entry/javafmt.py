"""Java's ``Double.toString(double)`` and ``Float.toString(float)``, which Canal uses for DOUBLE and FLOAT
column values (``String.valueOf`` of the boxed value in LogEventConvert.parseOneRow).

The specification implemented is the one in the Javadoc of ``Double.toString`` since JDK 19 (the
Ryu-like "shortest decimal" specification; earlier JDKs printed some values with superfluous digits):

- NaN, infinities and zeros print as ``NaN``, ``Infinity``, ``-Infinity``, ``0.0``, ``-0.0``.
- Otherwise a decimal ``d = s * 10**i`` (``s`` not a multiple of 10, length ``n`` = digits of ``s``) is
  chosen: among the decimals that round to the value under round-half-even, take those of minimal
  length ``m`` (when ``m == 1``, those of length 1 or 2), and of those the one closest to the value
  (ties: even ``s``).
- With ``e = n + i - 1``: for ``-3 <= e < 7`` plain notation with at least one digit after the point
  (``0.001``, ``123.0``, ``1234567.0``); otherwise ``s1.s2...snEe`` with at least one fractional
  digit (``1.0E7``, ``1.0E-4``, ``1.23E-19``).

For doubles Python's ``repr`` already yields the shortest closest digits, so it is the fast path; the
exact integer search below handles floats, the ``m == 1`` rule and is the reference for both.
"""

from __future__ import annotations

import math
import struct

__all__ = ["java_double_to_string", "java_float_to_string"]

_PACK_D = struct.Struct("<d").pack
_UNPACK_Q = struct.Struct("<Q").unpack
_PACK_F = struct.Struct("<f").pack
_UNPACK_I = struct.Struct("<I").unpack


def java_double_to_string(x: float) -> str:
    """``Double.toString(x)``."""
    if x != x:
        return "NaN"
    if x == math.inf:
        return "Infinity"
    if x == -math.inf:
        return "-Infinity"
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    s, i = _repr_digits(abs(x))
    if s < 10:  # minimal length 1: Java also considers length-2 decimals (e.g. 4.9E-324, not 5E-324)
        s, i = _exact_digits(*_double_parts(abs(x)))
    return sign + _layout(s, i)


def java_float_to_string(x: float) -> str:
    """``Float.toString(f)`` for the float32 value ``f`` held in ``x`` (a float decoded from a FLOAT
    column is exactly a float32; other values are rounded to float32 first)."""
    if x != x:
        return "NaN"
    bits = _UNPACK_I(_PACK_F(x))[0]
    negative = bool(bits >> 31)
    bits &= 0x7FFFFFFF
    if bits == 0x7F800000:
        return "-Infinity" if negative else "Infinity"
    if bits == 0:
        return "-0.0" if negative else "0.0"
    biased, frac = bits >> 23, bits & 0x7FFFFF
    if biased:
        m, e, lower_half = frac | 0x800000, biased - 150, frac == 0 and biased > 1
    else:
        m, e, lower_half = frac, -149, False
    s, i = _exact_digits(m, e, lower_half)
    return ("-" if negative else "") + _layout(s, i)


# --- digit selection ----------------------------------------------------------------------------

def _double_parts(x: float) -> tuple[int, int, bool]:
    bits = _UNPACK_Q(_PACK_D(x))[0] & 0x7FFFFFFFFFFFFFFF
    biased, frac = bits >> 52, bits & 0xFFFFFFFFFFFFF
    if biased:
        return frac | 0x10000000000000, biased - 1075, frac == 0 and biased > 1
    return frac, -1074, False


def _repr_digits(x: float) -> tuple[int, int]:
    """(s, i) with x ~ s * 10**i from Python's shortest round-trip repr; s has no trailing zeros."""
    r = repr(x)
    mant, _, exp = r.partition("e")
    i = int(exp) if exp else 0
    whole, _, frac = mant.partition(".")
    digits = (whole + frac).lstrip("0")
    i -= len(frac)
    stripped = digits.rstrip("0")
    i += len(digits) - len(stripped)
    return int(stripped), i


def _exact_digits(m: int, e: int, lower_half: bool) -> tuple[int, int]:
    """Java's decimal for v = m * 2**e (m > 0), by exact integer arithmetic.

    The rounding interval of v is [v - gl, v + gu] with gu = 2**(e-1) and gl = gu, or gu / 2 when v is
    a power of two above the smallest normal (its lower neighbour is closer); its ends belong to it
    when m is even (round-half-even sends a tie to the even significand).
    """
    # Work in units of 2**(e-2): v = 4m, upper end 4m + 2, lower end 4m - 2 (or 4m - 1).
    v4 = 4 * m
    hi4 = v4 + 2
    lo4 = v4 - (1 if lower_half else 2)
    inclusive = m % 2 == 0
    # a decimal s * 10**q compares with X * 2**(e-2) through integers: s * 10**q * 2**(2-e) vs X
    two_num = 1 << max(e - 2, 0)  # 2**(e-2) = two_num / two_den
    two_den = 1 << max(2 - e, 0)

    def scaled(s: int, q: int) -> tuple[int, int]:
        """(a, b): the decimal s * 10**q as a / b in units of 2**(e-2)."""
        if q >= 0:
            return s * 10**q * two_den, two_num
        return s * two_den, 10 ** (-q) * two_num

    def inside(s: int, q: int) -> bool:
        a, b = scaled(s, q)
        lo, hi = lo4 * b, hi4 * b
        return lo <= a <= hi if inclusive else lo < a < hi

    # decimal exponent k of v: 10**k <= v < 10**(k+1)
    k = math.floor(math.log10(m) + e * math.log10(2))
    while _cmp_pow10(v4, k + 1, two_num, two_den) >= 0:
        k += 1
    while _cmp_pow10(v4, k, two_num, two_den) < 0:
        k -= 1

    n = 1
    while True:
        q = k - n + 1
        lo_s = _floor_div_v(v4, q, two_num, two_den)
        exact = _cmp_dec(lo_s, q, v4, two_num, two_den) == 0
        if exact or inside(lo_s, q) or inside(lo_s + 1, q):
            break
        n += 1
    if n == 1:  # Java: when the minimal length is 1, choose among decimals of length 1 or 2
        n = 2
        q = k - 1
        lo_s = _floor_div_v(v4, q, two_num, two_den)
        exact = _cmp_dec(lo_s, q, v4, two_num, two_den) == 0
    if exact:
        return _normalize(lo_s, q)
    cands = [s for s in (lo_s, lo_s + 1) if inside(s, q)]
    if len(cands) == 1:
        return _normalize(cands[0], q)
    # both in the interval: the closer one; on a tie the even significand
    a_lo, b = scaled(lo_s, q)
    a_hi, _ = scaled(lo_s + 1, q)
    d_lo = v4 * b - a_lo
    d_hi = a_hi - v4 * b
    if d_lo < d_hi:
        return _normalize(lo_s, q)
    if d_hi < d_lo:
        return _normalize(lo_s + 1, q)
    s_lo, i_lo = _normalize(lo_s, q)
    s_hi, i_hi = _normalize(lo_s + 1, q)
    return (s_lo, i_lo) if s_lo % 2 == 0 else (s_hi, i_hi)


def _cmp_pow10(v4: int, k: int, two_num: int, two_den: int) -> int:
    """Sign of v - 10**k, v = v4 * 2**(e-2)."""
    return _cmp_dec(1, k, v4, two_num, two_den) * -1


def _cmp_dec(s: int, q: int, v4: int, two_num: int, two_den: int) -> int:
    """Sign of s * 10**q - v."""
    if q >= 0:
        a, b = s * 10**q * two_den, v4 * two_num
    else:
        a, b = s * two_den, v4 * two_num * 10 ** (-q)
    return (a > b) - (a < b)


def _floor_div_v(v4: int, q: int, two_num: int, two_den: int) -> int:
    """floor(v / 10**q)."""
    if q >= 0:
        return (v4 * two_num) // (two_den * 10**q)
    return (v4 * two_num * 10 ** (-q)) // two_den


def _normalize(s: int, q: int) -> tuple[int, int]:
    while s % 10 == 0:
        s //= 10
        q += 1
    return s, q


# --- layout -------------------------------------------------------------------------------------

def _layout(s: int, i: int) -> str:
    digits = str(s)
    n = len(digits)
    e = n + i - 1
    if 0 <= e < 7:
        if i >= 0:
            return digits + "0" * i + ".0"
        return digits[:n + i] + "." + digits[n + i:]
    if -3 <= e < 0:
        return "0." + "0" * (-(n + i)) + digits
    if n == 1:
        return f"{digits}.0E{e}"
    return f"{digits[0]}.{digits[1:]}E{e}"
