"""Column value decoding helpers shared by the generated row decoders.

Value conventions (what a decoded row holds):
- integers: int (unsigned when the table map or a schema hint says so); FLOAT/DOUBLE: float
- DECIMAL: decimal.Decimal, exact
- DATE: datetime.date; DATETIME: naive datetime.datetime; TIMESTAMP: datetime.datetime in UTC
  (tz-aware); TIME: datetime.timedelta; YEAR: int. A zero or otherwise unrepresentable date stays in
  MySQL's text form ("0000-00-00", "2020-02-30 00:00:00"), as the server prints it.
- CHAR/VARCHAR/TEXT: str in the column's charset; binary strings, BLOB, GEOMETRY: bytes
- BIT: int; ENUM: str (int index when the value list is unknown); SET: str "a,b" (int bitmask when unknown)
- JSON (MySQL binary): str as MySQL prints it; VECTOR: list[float]
"""

from __future__ import annotations

import codecs
import datetime as _dt
import ipaddress
from collections.abc import Callable
from decimal import Context, Decimal

import pymysql.charset

UTC = _dt.UTC
_date = _dt.date
_datetime = _dt.datetime
_timedelta = _dt.timedelta
_fromts = _dt.datetime.fromtimestamp
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=UTC)

# Bytes needed for 0..9 leftover decimal digits in MySQL's binary DECIMAL format.
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def decimal_size(precision: int, scale: int) -> int:
    intg = precision - scale
    return (intg // 9) * 4 + _DIG2BYTES[intg % 9] + (scale // 9) * 4 + _DIG2BYTES[scale % 9]


_EXACT = Context(prec=80)  # DECIMAL has at most 65 digits
_DECIMAL_CACHE: dict[tuple[int, int], Callable[[bytes], Decimal]] = {}


def decimal_decoder(precision: int, scale: int) -> Callable[[bytes], Decimal]:
    """A decoder specialised for DECIMAL(precision, scale), taking exactly decimal_size() bytes.

    The stored form is base-10^9 groups, big-endian, sign in the top bit (negatives are one's
    complement). Groups are byte-aligned, so the whole value is one big integer sliced by shifts.
    """
    key = (precision, scale)
    fn = _DECIMAL_CACHE.get(key)
    if fn is not None:
        return fn
    if not (0 < precision <= 65 and 0 <= scale <= 30 and scale <= precision):
        raise ValueError(f"invalid DECIMAL({precision},{scale})")
    intg = precision - scale
    # (bytes, digits) for each group, most significant first
    int_groups = ([(_DIG2BYTES[intg % 9], intg % 9)] if intg % 9 else []) + [(4, 9)] * (intg // 9)
    frac_groups = [(4, 9)] * (scale // 9) + ([(_DIG2BYTES[scale % 9], scale % 9)] if scale % 9 else [])
    size = decimal_size(precision, scale)
    nbits = size * 8
    lines = [
        "def dec(b):",
        "    x = _from_bytes(b, 'big')",
        f"    if x >> {nbits - 1}:",
        f"        x ^= {1 << (nbits - 1)}",
        "        sign = False",
        "    else:",
        f"        x ^= {(1 << (nbits - 1)) - 1}",
        "        sign = True",
    ]
    shift = nbits
    int_terms = []
    for nbytes, _digits in int_groups:
        shift -= nbytes * 8
        int_terms.append(f"((x >> {shift}) & {(1 << (nbytes * 8)) - 1})")
    frac_terms = []
    for nbytes, digits in frac_groups:
        shift -= nbytes * 8
        frac_terms.append((f"((x >> {shift}) & {(1 << (nbytes * 8)) - 1})", digits))
    # unscaled value by Horner over the groups; scaleb in an 80-digit context is exact and avoids
    # building a string per value
    expr = "0"
    for term in int_terms:
        expr = f"({expr}) * 1000000000 + {term}"
    for term, digits in frac_terms:
        expr = f"({expr}) * {10 ** digits} + {term}"
    lines.append(f"    n = {expr}")
    lines.append(f"    if n >= {10 ** precision}: raise ValueError('DECIMAL({precision},{scale}) digits out of range')")
    lines.append("    if sign: n = -n")
    lines.append(f"    return _Decimal(n).scaleb(-{scale}, _CTX)" if scale else "    return _Decimal(n)")
    ns: dict[str, object] = {"_from_bytes": int.from_bytes, "_Decimal": Decimal, "_CTX": _EXACT}
    exec("\n".join(lines), ns)
    fn = ns["dec"]  # type: ignore[assignment]
    _DECIMAL_CACHE[key] = fn  # type: ignore[assignment]
    return fn  # type: ignore[return-value]


# --- temporal -------------------------------------------------------------------------------

def _text_date(y: int, m: int, d: int) -> str:
    return f"{y:04d}-{m:02d}-{d:02d}"


def _text_time(h: int, mi: int, s: int, us: int, fsp: int) -> str:
    text = f"{h:02d}:{mi:02d}:{s:02d}"
    if fsp:
        text += "." + f"{us:06d}"[:fsp]
    return text


def make_datetime(y: int, m: int, d: int, h: int, mi: int, s: int, us: int, fsp: int) -> _dt.datetime | str:
    try:
        return _dt.datetime(y, m, d, h, mi, s, us)
    except ValueError:
        return _text_date(y, m, d) + " " + _text_time(h, mi, s, us, fsp)


def date3(v: int) -> _dt.date | str:
    """DATE: 3 bytes little-endian, day | month << 5 | year << 9."""
    try:
        return _date(v >> 9, (v >> 5) & 15, v & 31)
    except ValueError:
        return _text_date(v >> 9, (v >> 5) & 15, v & 31)


def timestamp_old(secs: int) -> _dt.datetime | str:
    if secs == 0:
        return "0000-00-00 00:00:00"
    return _EPOCH + _dt.timedelta(seconds=secs)


def datetime_old(v: int) -> _dt.datetime | str:
    """Pre-5.6 DATETIME: 8 bytes, the decimal number YYYYMMDDhhmmss."""
    d, t = divmod(v, 1000000)
    return make_datetime(d // 10000, (d // 100) % 100, d % 100, t // 10000, (t // 100) % 100, t % 100, 0, 0)


def time_old(v: int) -> _dt.timedelta:
    """Pre-5.6 TIME: signed 3-byte decimal number [-]HHMMSS."""
    neg = v < 0
    v = abs(v)
    td = _dt.timedelta(hours=v // 10000, minutes=(v // 100) % 100, seconds=v % 100)
    return -td if neg else td


def time2(b: bytes, fsp: int) -> _dt.timedelta:
    """TIME2: 3 bytes big-endian (offset 2^23) hour:10 minute:6 second:6, then fraction bytes.

    Negative values store the fraction as its complement, hence the borrow below.
    """
    if fsp >= 5:
        v = int.from_bytes(b[:6], "big") - 0x800000000000
        intpart, frac = v >> 24, v & 0xFFFFFF
        if intpart < 0 and frac:
            intpart += 1
            frac -= 0x1000000
    else:
        intpart = int.from_bytes(b[:3], "big") - 0x800000
        frac = 0
        if fsp:
            width = 1 if fsp <= 2 else 2
            frac = int.from_bytes(b[3:3 + width], "big")
            if intpart < 0 and frac:
                intpart += 1
                frac -= 1 << (8 * width)
            frac *= 10000 if width == 1 else 100
    neg = intpart < 0 or (intpart == 0 and frac < 0)
    ip, fr = abs(intpart), abs(frac)
    td = _dt.timedelta(hours=(ip >> 12) & 0x3FF, minutes=(ip >> 6) & 0x3F, seconds=ip & 0x3F, microseconds=fr)
    return -td if neg else td


_TEMPORAL_CACHE: dict[tuple[str, int], Callable[[bytes], object]] = {}


def _frac_code(fsp: int) -> list[str]:
    """Code splitting the fraction bytes off the big-endian integer v into microseconds us."""
    n = temporal_size(fsp)
    if not n:
        return ["    us = 0"]
    mult = {1: 10000, 2: 100, 3: 1}[n]
    return [f"    us = (v & {(1 << (8 * n)) - 1}) * {mult}", f"    v >>= {8 * n}"]


def datetime2_decoder(fsp: int) -> Callable[[bytes], _dt.datetime | str]:
    """DATETIME2(fsp) specialised: 5 bytes packed (offset 2^39) + fraction, one integer read."""
    key = ("datetime2", fsp)
    fn = _TEMPORAL_CACHE.get(key)
    if fn is None:
        src = ["def f(b):", "    v = _fb(b, 'big')", *_frac_code(fsp), "    v -= 0x8000000000",
               "    if v < 0: raise ValueError('negative DATETIME2')",
               "    ymd = v >> 17", "    ym = ymd >> 5", "    hms = v & 0x1FFFF",
               "    try:",
               "        return _datetime(ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63, us)",
               "    except ValueError:",
               f"        return _mdt(ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63, us, {fsp})"]
        fn = _compile(src, {"_mdt": make_datetime})
        _TEMPORAL_CACHE[key] = fn
    return fn  # type: ignore[return-value]


def timestamp2_decoder(fsp: int) -> Callable[[bytes], _dt.datetime | str]:
    """TIMESTAMP2(fsp) specialised: 4 bytes big-endian epoch seconds + fraction; 0 is the zero date."""
    key = ("timestamp2", fsp)
    fn = _TEMPORAL_CACHE.get(key)
    if fn is None:
        zero = "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else "")
        src = ["def f(b):", "    v = _fb(b, 'big')", *_frac_code(fsp),
               f"    if not v and not us: return {zero!r}",
               "    return _EPOCH + _timedelta(0, v, us)" if fsp else "    return _fromts(v, _UTC)"]
        fn = _compile(src, {})
        _TEMPORAL_CACHE[key] = fn
    return fn  # type: ignore[return-value]


def _compile(src: list[str], extra: dict[str, object]) -> Callable[[bytes], object]:
    ns: dict[str, object] = {"_fb": int.from_bytes, "_datetime": _datetime, "_timedelta": _timedelta,
                             "_EPOCH": _EPOCH, "_fromts": _fromts, "_UTC": UTC, **extra}
    exec("\n".join(src), ns)
    return ns["f"]  # type: ignore[return-value]


def temporal_size(fsp: int) -> int:
    return (fsp + 1) // 2


# --- strings --------------------------------------------------------------------------------

_CODECS: dict[int, str | None] = {}


def codec_for_collation(collation_id: int) -> str | None:
    """Python codec for a MySQL/MariaDB collation id; None means binary (keep bytes)."""
    codec = _CODECS.get(collation_id, "?")
    if codec != "?":
        return codec
    if collation_id == 63:
        codec = None
    else:
        try:
            cs = pymysql.charset.charset_by_id(collation_id)
        except KeyError:
            cs = None
        if cs is not None:
            codec = None if cs.is_binary else _python_codec(cs.encoding)
        elif collation_id >= 256:
            # MySQL 8 utf8mb4_0900_* and MariaDB 10.10+/11 UCA-14 collations above 255 are
            # utf8mb4/utf8mb3, the only charsets given ids past the classic table.
            codec = "utf8"
        else:
            raise ValueError(f"unknown collation id {collation_id}")
    _CODECS[collation_id] = codec
    return codec


def _python_codec(name: str) -> str | None:
    """The codec if Python has it; charsets it lacks (dec8, hp8, swe7, armscii8, keybcs2, macce,
    geostd8, eucjpms) stay bytes: better raw than guessed."""
    try:
        codecs.lookup(name)
    except LookupError:
        return None
    return name


def charset_codec(charset_name: str) -> str | None:
    name = charset_name.lower()
    if name == "binary":
        return None
    cs = pymysql.charset.charset_by_name(name)
    if cs is None:
        raise ValueError(f"unknown charset {charset_name!r}")
    return _python_codec(cs.encoding)


# --- enum / set / logical types ---------------------------------------------------------------

def set_text(mask: int, values: tuple[str, ...]) -> str:
    return ",".join(v for i, v in enumerate(values) if mask >> i & 1)


def mariadb_uuid_text(b: bytes) -> str:
    """MariaDB UUID: 16 bytes in the row image, in the order of the text form (checked against
    MariaDB 10.11 for version 1, 4 and nil UUIDs by the live type-matrix test)."""
    if len(b) != 16:
        raise ValueError("UUID must be 16 bytes")
    h = b.hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def inet6_text(b: bytes) -> str:
    addr = ipaddress.IPv6Address(bytes(b))
    v4 = addr.ipv4_mapped
    if v4 is not None:
        return f"::ffff:{v4}"
    # MariaDB prints IPv4-compatible addresses (::a.b.c.d) in dotted form as well
    if b[:12] == b"\0" * 12 and int.from_bytes(b[12:], "big") > 0xFFFF:
        return f"::{ipaddress.IPv4Address(bytes(b[12:]))}"
    return addr.compressed


def inet4_text(b: bytes) -> str:
    return str(ipaddress.IPv4Address(bytes(b)))
