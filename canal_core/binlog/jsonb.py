"""MySQL binary JSON (JSON column, type 245) to text (the PARTIAL_UPDATE_ROWS diffs are in jsondiff.py).

Text is what MySQL 8.0 prints for the value in a SELECT (``Json_wrapper::to_string``):
``", "`` and ``": "`` separators, object members in stored order, strings escaped like MySQL's
``double_quote()`` (``\\" \\\\ \\b \\f \\n \\r \\t``, other bytes <= 0x1f as ``\\u00xx``), doubles
through ``my_gcvt()`` plus ``.0`` when neither ``.`` nor ``e`` appears, DECIMAL unquoted,
temporals quoted with 6 fractional digits (DATE without time), other opaque values as
``"base64:type<N>:<base64>"``.

Binary layout (``json_binary.h``): a type byte, then the value. Objects/arrays are
``count, size`` (uint16 in the small format, uint32 in the large one), key entries
``(offset, uint16 length)`` for objects, value entries ``(type, offset-or-inlined value)``;
offsets count from the container's first byte. Literals, int16 and uint16 are always inlined in
the entry, int32/uint32 only in the large format. Strings are a 7-bit varint length + UTF-8,
opaque values a column-type byte + varint length + bytes.

Differences from MySQL 5.7's printer, which we do not follow: 5.7 printed integral doubles
without ``.0``, left base64 newlines unescaped and printed VAR_STRING opaque values as base64.
Unlike the server we accept a container whose declared size exceeds the bytes present (reads
stay bounded by the real buffer), since some writers get that field wrong.
"""

from __future__ import annotations

import base64
import re
from struct import Struct, unpack_from
from struct import error as _StructError

from .errors import MalformedEventError

__all__ = ["JsonDecodeError", "json_to_text", "quote_json_string"]


class JsonDecodeError(MalformedEventError, ValueError):
    """Binary JSON or a JSON diff is truncated, out of bounds or otherwise malformed."""

    hint = "the JSON column value is corrupt or was written by an unsupported server version"

    def _render(self) -> str:
        # Raised deep inside a row; the rows decoder adds the location with .at() when it knows it.
        if self.file is None and self.position is None:
            return self.reason
        return super()._render()


# Value types (json_binary.h)
_SMALL_OBJECT = 0x00
_LARGE_OBJECT = 0x01
_SMALL_ARRAY = 0x02
_LARGE_ARRAY = 0x03
_LITERAL = 0x04
_INT16 = 0x05
_UINT16 = 0x06
_INT32 = 0x07
_UINT32 = 0x08
_INT64 = 0x09
_UINT64 = 0x0A
_DOUBLE = 0x0B
_STRING = 0x0C
_OPAQUE = 0x0F

# Opaque column types with a dedicated printer (enum_field_types)
_MYSQL_TYPE_TIMESTAMP = 7
_MYSQL_TYPE_DATE = 10
_MYSQL_TYPE_TIME = 11
_MYSQL_TYPE_DATETIME = 12
_MYSQL_TYPE_VAR_STRING = 253
_MYSQL_TYPE_NEWDECIMAL = 246

# MySQL refuses documents nested deeper than this (JSON_DOCUMENT_MAX_DEPTH); it also bounds
# our recursion.
_MAX_DEPTH = 100

_LITERALS = {0: "null", 1: "true", 2: "false"}

# MySQL's double_quote(): every byte <= 0x1f, '"' and '\\' is escaped; nothing else (not even
# 0x7f or non-ASCII) is touched.
_ESCAPES = {i: f"\\u{i:04x}" for i in range(0x20)}
_ESCAPES.update({0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r",
                 0x22: '\\"', 0x5C: "\\\\"})
_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\]')
_ESCAPE_TABLE = str.maketrans(_ESCAPES)


def _fail(msg: str) -> JsonDecodeError:
    return JsonDecodeError(f"invalid binary JSON: {msg}")


def quote_json_string(s: str) -> str:
    """A JSON string literal as MySQL's double_quote() writes it."""
    # isprintable() (no control characters) plus two substring tests is the cheapest way to
    # find that the common string needs no escaping; other strings take the regex.
    if (s.isprintable() or not _NEEDS_ESCAPE.search(s)) and '"' not in s and "\\" not in s:
        return f'"{s}"'
    return f'"{s.translate(_ESCAPE_TABLE)}"'


def _quote_bytes(raw: bytes) -> str:
    try:
        s = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _fail(f"string is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    if (s.isprintable() or not _NEEDS_ESCAPE.search(s)) and '"' not in s and "\\" not in s:
        return f'"{s}"'
    return f'"{s.translate(_ESCAPE_TABLE)}"'


# ---------------------------------------------------------------------------------------------
# scalar printers


def _format_double(d: float) -> str:
    """``my_gcvt(d, MY_GCVT_ARG_DOUBLE, MY_GCVT_MAX_FIELD_WIDTH)`` plus the ``.0`` MySQL 8 adds."""
    if d != d or d in (float("inf"), float("-inf")):
        # dtoa() reports overflow and my_gcvt() writes "0"; JSON text can not hold these anyway.
        return "0.0"
    # repr() gives the shortest round-trip digits, which is what dtoa mode 4 returns when the
    # digit budget (34) exceeds 17.
    r = repr(d)
    neg = r[0] == "-"
    mant, _, exp = (r[1:] if neg else r).partition("e")
    ip, _, fp = mant.partition(".")
    digits = ip + fp
    decpt = len(ip) + (int(exp) if exp else 0)
    stripped = digits.lstrip("0")
    decpt -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    if not digits:
        digits, decpt = "0", 1
    n = len(digits)
    width = 34 - (1 if d < 0.0 else 0)  # MY_GCVT_MAX_FIELD_WIDTH minus the sign
    exp_len = 1 + (decpt >= 101 or decpt <= -99) + (decpt >= 11 or decpt <= -9)
    if decpt <= 0:
        f_len = n - decpt + 2
    elif decpt < n:
        f_len = n + 1
    else:
        f_len = decpt
    have_space = f_len <= width
    force_e = decpt <= 0 and width <= 2 - decpt and width >= 3 + exp_len
    use_f = (
        have_space
        or (decpt <= width and (decpt >= -1 or (decpt == -2 and (n > 1 or not force_e))) and not force_e)
    ) and (not have_space or (decpt >= -14 and (decpt <= 15 or n > decpt)))
    sign = "-" if neg else ""
    if use_f:
        # With at most 17 digits and a width of 33+, the 'f' form never needs truncation.
        if decpt <= 0:
            text = f"{sign}0.{'0' * -decpt}{digits}"
        elif decpt < n:
            text = f"{sign}{digits[:decpt]}.{digits[decpt:]}"
        else:
            text = f"{sign}{digits}{'0' * (decpt - n)}"
        if "." not in text:
            text += ".0"
        return text
    e = decpt - 1
    body = digits if n == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{sign}{body}e{e}"


_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_POW10 = tuple(10**i for i in range(11))


def _format_decimal(raw: bytes) -> str:
    """Precision byte, scale byte, then a DECIMAL in MySQL's binary format; printed like
    ``decimal2string()``: no leading zeros, exactly ``scale`` fraction digits."""
    if len(raw) < 2:
        raise _fail("DECIMAL opaque value shorter than its precision and scale bytes")
    precision, scale = raw[0], raw[1]
    if not 0 < precision <= 65 or scale > 30 or scale > precision:
        raise _fail(f"DECIMAL precision {precision} / scale {scale} out of range")
    intg0, intg0x = divmod(precision - scale, 9)
    frac0, frac0x = divmod(scale, 9)
    size = intg0 * 4 + _DIG2BYTES[intg0x] + frac0 * 4 + _DIG2BYTES[frac0x]
    if len(raw) - 2 != size:
        raise _fail(f"DECIMAL({precision},{scale}) needs {size} bytes, has {len(raw) - 2}")
    # The sign lives in the inverted top bit; negative numbers have every byte inverted too.
    first = raw[2]
    negative = not first & 0x80
    b = bytes((first ^ 0x80,)) + raw[3:]
    if negative:
        b = bytes(x ^ 0xFF for x in b)
    p = 0
    int_part: list[str] = []
    if intg0x:
        k = _DIG2BYTES[intg0x]
        v = int.from_bytes(b[p:p + k], "big")
        # bin2decimal() accepts one digit more than the group holds; so do we.
        if v >= _POW10[intg0x + 1]:
            raise _fail("DECIMAL digit group out of range")
        int_part.append(str(v))
        p += k
    for _ in range(intg0):
        v = int.from_bytes(b[p:p + 4], "big")
        if v > 999_999_999:
            raise _fail("DECIMAL digit group out of range")
        int_part.append(f"{v:09d}")
        p += 4
    frac_part: list[str] = []
    for _ in range(frac0):
        v = int.from_bytes(b[p:p + 4], "big")
        if v > 999_999_999:
            raise _fail("DECIMAL digit group out of range")
        frac_part.append(f"{v:09d}")
        p += 4
    if frac0x:
        k = _DIG2BYTES[frac0x]
        v = int.from_bytes(b[p:p + k], "big")
        if v >= _POW10[frac0x]:
            raise _fail("DECIMAL digit group out of range")
        frac_part.append(f"{v:0{frac0x}d}")
    text = "".join(int_part).lstrip("0") or "0"
    if scale:
        text = f"{text}.{''.join(frac_part)}"
    return f"-{text}" if negative else text


def _format_temporal(field_type: int, raw: bytes) -> str:
    """A packed "longlong temporal" (TIME_to_longlong_*_packed) printed by my_TIME_to_str(.., 6)."""
    if len(raw) != 8:
        raise _fail(f"temporal opaque value of {len(raw)} bytes, expected 8")
    packed = int.from_bytes(raw, "little", signed=True)
    neg = packed < 0
    if neg:
        packed = -packed
    frac = packed & 0xFFFFFF
    intpart = packed >> 24
    if field_type == _MYSQL_TYPE_TIME:
        hour = (intpart >> 12) & 0x3FF
        minute = (intpart >> 6) & 0x3F
        second = intpart & 0x3F
        return f'"{"-" if neg else ""}{hour:02d}:{minute:02d}:{second:02d}.{frac:06d}"'
    ymd = intpart >> 17
    hms = intpart & 0x1FFFF
    ym = ymd >> 5
    day = ymd & 0x1F
    year, month = divmod(ym, 13)
    if field_type == _MYSQL_TYPE_DATE:
        return f'"{year:04d}-{month:02d}-{day:02d}"'
    hour = hms >> 12
    minute = (hms >> 6) & 0x3F
    second = hms & 0x3F
    return f'"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}.{frac:06d}"'


def _format_opaque(field_type: int, raw: bytes) -> str:
    if field_type == _MYSQL_TYPE_NEWDECIMAL:
        return _format_decimal(raw)
    if field_type in (_MYSQL_TYPE_DATETIME, _MYSQL_TYPE_TIMESTAMP, _MYSQL_TYPE_DATE, _MYSQL_TYPE_TIME):
        return _format_temporal(field_type, raw)
    if field_type == _MYSQL_TYPE_VAR_STRING:
        # MySQL 8 prints strings kept in opaque values as plain JSON strings.
        return _quote_bytes(raw)
    # MySQL's base64_encode() breaks lines every 76 characters; the newline is then escaped.
    b64 = base64.b64encode(raw).decode("ascii")
    if len(b64) > 76:
        b64 = "\\n".join(b64[i:i + 76] for i in range(0, len(b64), 76))
    return f'"base64:type{field_type}:{b64}"'


# ---------------------------------------------------------------------------------------------
# the walker


class _Printer:
    """Walks one binary document and appends text pieces to ``out``.

    ``budget`` caps the work at a small multiple of the input size: valid documents never share
    bytes between values, so a corrupt one whose offsets alias each other (which could make the
    output grow exponentially) is rejected instead of hanging.
    """

    __slots__ = ("budget", "buf", "out")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.out: list[str] = []
        self.budget = 2 * len(buf) + 16

    def varlen(self, pos: int, end: int) -> tuple[int, int]:
        """A 7-bit little-endian varint of at most 5 bytes; returns (value, next position)."""
        buf = self.buf
        value = 0
        for i in range(5):
            if pos + i >= end:
                raise _fail(f"length at offset {pos} runs past the end")
            byte = buf[pos + i]
            value |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                if value > 0xFFFFFFFF:
                    raise _fail(f"length at offset {pos} exceeds 32 bits")
                return value, pos + i + 1
        raise _fail(f"length at offset {pos} is longer than 5 bytes")

    def string(self, pos: int, end: int) -> str:
        n, pos = self.varlen(pos, end)
        stop = pos + n
        if stop > end:
            raise _fail(f"string of {n} bytes at offset {pos} runs past the end")
        self.budget -= n
        if self.budget < 0:
            raise _fail("value offsets overlap")
        return _quote_bytes(self.buf[pos:stop])

    def opaque(self, pos: int, end: int) -> str:
        if pos >= end:
            raise _fail(f"opaque value at offset {pos} has no type byte")
        field_type = self.buf[pos]
        n, pos = self.varlen(pos + 1, end)
        stop = pos + n
        if stop > end:
            raise _fail(f"opaque value of {n} bytes at offset {pos} runs past the end")
        self.budget -= n
        if self.budget < 0:
            raise _fail("value offsets overlap")
        return _format_opaque(field_type, self.buf[pos:stop])

    def scalar(self, t: int, pos: int, end: int) -> str:
        """A non-container value stored at pos (not inlined)."""
        buf = self.buf
        try:
            if t == _STRING:
                return self.string(pos, end)
            if t == _INT16:
                if pos + 2 > end:
                    raise _fail(f"int16 at offset {pos} runs past the end")
                return str(unpack_from("<h", buf, pos)[0])
            if t == _UINT16:
                if pos + 2 > end:
                    raise _fail(f"uint16 at offset {pos} runs past the end")
                return str(unpack_from("<H", buf, pos)[0])
            if t == _INT32:
                if pos + 4 > end:
                    raise _fail(f"int32 at offset {pos} runs past the end")
                return str(unpack_from("<i", buf, pos)[0])
            if t == _UINT32:
                if pos + 4 > end:
                    raise _fail(f"uint32 at offset {pos} runs past the end")
                return str(unpack_from("<I", buf, pos)[0])
            if t == _INT64:
                if pos + 8 > end:
                    raise _fail(f"int64 at offset {pos} runs past the end")
                return str(unpack_from("<q", buf, pos)[0])
            if t == _UINT64:
                if pos + 8 > end:
                    raise _fail(f"uint64 at offset {pos} runs past the end")
                return str(unpack_from("<Q", buf, pos)[0])
            if t == _DOUBLE:
                if pos + 8 > end:
                    raise _fail(f"double at offset {pos} runs past the end")
                return _format_double(unpack_from("<d", buf, pos)[0])
            if t == _LITERAL:
                if pos >= end:
                    raise _fail(f"literal at offset {pos} runs past the end")
                lit = _LITERALS.get(buf[pos])
                if lit is None:
                    raise _fail(f"unknown literal {buf[pos]:#x} at offset {pos}")
                return lit
            if t == _OPAQUE:
                return self.opaque(pos, end)
        except _StructError as e:  # pragma: no cover - the bounds checks above come first
            raise _fail(str(e)) from None
        raise _fail(f"unknown value type {t:#x} at offset {pos - 1}")

    def container(self, t: int, pos: int, end: int, depth: int) -> None:
        """Object or array of type t (0-3) whose count/size header starts at pos."""
        if depth > _MAX_DEPTH:
            raise _fail(f"document nested deeper than {_MAX_DEPTH} levels")
        buf = self.buf
        large = t & 1
        if end - pos < (8 if large else 4):
            raise _fail(f"container header at offset {pos} runs past the end")
        count, size = (_U32X2 if large else _U16X2)(buf, pos)
        # A declared size beyond the buffer is tolerated (some writers get it wrong); every
        # read below is still bounded by the real end.
        cend = pos + size
        if cend > end:
            cend = end
        clen = cend - pos
        # header + entries: key entries (offset, uint16 length), value entries (type, offset)
        osz = 4 if large else 2
        hsize = 2 * osz + count * ((osz + 2 if t < _SMALL_ARRAY else 0) + 1 + osz)
        if hsize > clen:
            raise _fail(f"{count} entries at offset {pos} do not fit in {clen} bytes")
        layout = _LAYOUTS.get((t << 32) | count) or _layout(t, count)
        # All entries in one unpack: for objects (key offset, key length) pairs, then
        # (type, offset-or-inlined value) pairs.
        ent = layout.unpack_from(buf, pos + 2 * osz)
        out = self.out
        budget = self.budget - count
        is_object = t < _SMALL_ARRAY
        out.append("{" if is_object else "[")
        # Plain loops with index arithmetic: on small containers they beat comprehensions and zip.
        j = 2 * count if is_object else 0
        k = 0
        sep = ""
        for _ in range(count):
            if is_object:
                koff = ent[k]
                klen = ent[k + 1]
                k += 2
                if koff < hsize or koff + klen > clen:
                    raise _fail(f"a key of the object at offset {pos} is out of bounds")
                budget -= klen
                a = pos + koff
                prefix = f"{sep}{_quote_bytes(buf[a:a + klen])}: "
            else:
                prefix = sep
            sep = ", "
            vt = ent[j]
            x = ent[j + 1]
            j += 2
            # Literals, int16 and uint16 (and int32/uint32 when large) sit in the entry itself.
            if vt == _STRING:
                if x < hsize or x >= clen:
                    raise _fail(f"a value of the container at offset {pos} is out of bounds")
                a = pos + x
                ln = buf[a]
                if ln < 0x80:  # one-byte length: the common case, done here
                    a += 1
                    b = a + ln
                    if b > cend:
                        raise _fail(f"string of {ln} bytes at offset {a} runs past the end")
                    budget -= ln
                    out.append(prefix + _quote_bytes(buf[a:b]))
                else:
                    self.budget = budget
                    out.append(prefix + self.string(a, cend))
                    budget = self.budget
            elif vt == _INT16:
                out.append(f"{prefix}{x - 0x10000 if x & 0x8000 else x}")
            elif vt == _LITERAL:
                lit = _LITERALS.get(x & 0xFF)
                if lit is None:
                    raise _fail(f"unknown literal {x & 0xFF:#x} in the container at offset {pos}")
                out.append(prefix + lit)
            elif vt == _UINT16:
                out.append(f"{prefix}{x}")
            elif large and vt == _INT32:
                out.append(f"{prefix}{x - 0x100000000 if x & 0x80000000 else x}")
            elif large and vt == _UINT32:
                out.append(f"{prefix}{x}")
            else:
                if x < hsize or x >= clen:
                    raise _fail(f"a value of the container at offset {pos} is out of bounds")
                if budget < 0:
                    raise _fail("value offsets overlap")
                self.budget = budget
                if vt <= _LARGE_ARRAY:
                    if prefix:
                        out.append(prefix)
                    self.container(vt, pos + x, cend, depth + 1)
                else:
                    out.append(prefix + self.scalar(vt, pos + x, cend))
                budget = self.budget
            if budget < 0:
                raise _fail("value offsets overlap")
        self.budget = budget
        out.append("}" if is_object else "]")


_U16X2 = Struct("<HH").unpack_from
_U32X2 = Struct("<II").unpack_from
_LAYOUTS: dict[int, Struct] = {}


def _layout(t: int, count: int) -> Struct:
    """The Struct of a container's entries after its count/size header (cached by type and count)."""
    off = "I" if t & 1 else "H"
    keys = ("I" if t & 1 else "H") + "H" if t < _SMALL_ARRAY else ""
    st = Struct(f"<{keys * count}{('B' + off) * count}")
    if count <= 256:  # keep the cache small; huge containers are rare
        _LAYOUTS[(t << 32) | count] = st
    return st


def json_to_text(data: bytes | bytearray | memoryview) -> str:
    """The text MySQL prints for a JSON column value (the bytes after its length prefix).

    An empty value is JSON null, as in MySQL (rows stored with IGNORE or non-strict mode).
    Raises JsonDecodeError for anything truncated, out of bounds or malformed.
    """
    buf = data if type(data) is bytes else bytes(data)
    n = len(buf)
    if n == 0:
        return "null"
    t = buf[0]
    if t <= _LARGE_ARRAY:
        p = _Printer(buf)
        p.container(t, 1, n, 1)
        return "".join(p.out)
    if t == _STRING and n < 130:
        # Fast path for a short top-level string: one-byte length.
        ln = buf[1] if n > 1 else 0x80
        if ln < 0x80 and 2 + ln <= n:
            return _quote_bytes(buf[2:2 + ln])
    return _Printer(buf).scalar(t, 1, n)
