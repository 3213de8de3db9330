"""Row image decoding by generated code.

A rows event repeats one table layout thousands of times, so per-column dispatch in a loop is the
cost to avoid. For each (table layout, present-column bitmaps, event kind) we generate one Python
function that decodes every row of an event: fixed-width columns that follow each other are read
with a single struct call when the row has no NULLs (the common case), and each column's decoding is
written out inline. Generated functions are cached, so a TABLE_MAP repeated every transaction costs
a dictionary lookup.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from . import values as V
from .constants import ColumnType as T
from .jsonb import apply_json_diffs, json_to_text, parse_json_diffs
from .packed import read_packed
from .tablemap import BLOB_TYPES, Column, TableDef


class _Absent:
    """A column that the row image does not carry (binlog_row_image=MINIMAL or NOBLOB)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"

    def __reduce__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()

RowDecoder = Callable[[bytes, int, int], list[Any]]

_CACHE: dict[tuple, RowDecoder] = {}
_CACHE_MAX = 4096


def _ibe(b: bytes) -> int:
    return int.from_bytes(b, "big")


def _ile(b: bytes) -> int:
    return int.from_bytes(b, "little")


def _vector(b: bytes) -> list[float]:
    if len(b) % 4:
        raise ValueError("VECTOR length is not a multiple of 4")
    return list(struct.unpack(f"<{len(b) // 4}f", b))


_BASE_NS: dict[str, Any] = {
    "_ABSENT": ABSENT,
    "_date3": V.date3,
    "_ts_old": V.timestamp_old,
    "_dt_old": V.datetime_old,
    "_time_old": V.time_old,
    "_t2": V.time2,
    "_ibe": _ibe,
    "_ile": _ile,
    "_set": V.set_text,
    "_json": json_to_text,
    "_vector": _vector,
    "_uuid": V.mariadb_uuid_text,
    "_inet6": V.inet6_text,
    "_inet4": V.inet4_text,
    "_from_bytes": int.from_bytes,
}


class _Gen:
    def __init__(self) -> None:
        self.ns: dict[str, Any] = dict(_BASE_NS)
        self.n = 0

    def const(self, value: Any, prefix: str = "_c") -> str:
        self.n += 1
        name = f"{prefix}{self.n}"
        self.ns[name] = value
        return name


def _fixed(col: Column, g: _Gen) -> tuple[str, int, str] | None:
    """(struct format, byte size, post-expression over {0},{1}) for fixed-width columns, else None."""
    t, u = col.type, col.unsigned
    if t == T.TINY:
        return ("B" if u else "b"), 1, "{0}"
    if t == T.SHORT:
        return ("H" if u else "h"), 2, "{0}"
    if t == T.INT24:
        return ("HB" if u else "Hb"), 3, "({0} | {1} << 16)"
    if t == T.LONG:
        return ("I" if u else "i"), 4, "{0}"
    if t == T.LONGLONG:
        return ("Q" if u else "q"), 8, "{0}"
    if t == T.FLOAT:
        return "f", 4, "{0}"
    if t == T.DOUBLE:
        return "d", 8, "{0}"
    if t == T.YEAR:
        return "B", 1, "({0} + 1900 if {0} else 0)"
    if t in (T.DATE, T.NEWDATE):
        return "HB", 3, "_date3({0} | {1} << 16)"
    if t == T.TIMESTAMP:
        return "I", 4, "_ts_old({0})"
    if t == T.DATETIME:
        return "Q", 8, "_dt_old({0})"
    if t == T.TIME:
        return "Hb", 3, "_time_old({0} | {1} << 16)"
    if t == T.TIMESTAMP2:
        n = 4 + V.temporal_size(col.fsp)
        return f"{n}s", n, f"{g.const(V.timestamp2_decoder(col.fsp), '_ts2_')}({{0}})"
    if t == T.DATETIME2:
        n = 5 + V.temporal_size(col.fsp)
        return f"{n}s", n, f"{g.const(V.datetime2_decoder(col.fsp), '_dt2_')}({{0}})"
    if t == T.TIME2:
        n = 3 + V.temporal_size(col.fsp)
        return f"{n}s", n, f"_t2({{0}}, {col.fsp})"
    if t == T.NEWDECIMAL:
        n = V.decimal_size(col.precision, col.scale)
        dec = g.const(V.decimal_decoder(col.precision, col.scale), "_dec")
        return f"{n}s", n, f"{dec}({{0}})"
    if t == T.BIT:
        n = (col.bits + 7) // 8
        return f"{n}s", n, "_ibe({0})"
    if t == T.ENUM:
        fmt = {1: "B", 2: "H"}.get(col.length)
        if fmt is None:
            raise ValueError(f"ENUM storage of {col.length} bytes")
        if col.enum_values is not None:
            # index 0 is the "invalid value" MySQL stores for bad input in non-strict mode; it prints ''
            return fmt, col.length, f"{g.const(('', *col.enum_values))}[{{0}}]"
        return fmt, col.length, "{0}"
    if t == T.SET:
        n = col.length
        if not 1 <= n <= 8:
            raise ValueError(f"SET storage of {n} bytes")
        fmt, post = {1: ("B", "{0}"), 2: ("H", "{0}"), 4: ("I", "{0}"), 8: ("Q", "{0}")}.get(
            n, (f"{n}s", "_ile({0})"))
        if col.set_values is not None:
            post = f"_set({post}, {g.const(col.set_values)})"
        return fmt, n, post
    return None


class PartialJson(list):
    """JSON diffs of a PARTIAL_UPDATE_ROWS after image that could not be applied because the before
    image does not carry the column (binlog_row_image=MINIMAL): the consumer gets the diffs."""

    __slots__ = ()


def _apply_partial(before: Any, diffs: list[Any]) -> Any:
    if isinstance(before, str):
        return apply_json_diffs(before, diffs)
    return PartialJson(diffs)


def _nitems(fmt: str, size: int) -> int:
    return len(struct.Struct("<" + fmt).unpack(bytes(size)))


def _variable(col: Column, v: str, g: _Gen) -> list[str]:
    """Code lines that read a variable-length column into variable v, advancing p."""
    t = col.type
    if t in (T.VARCHAR, T.VAR_STRING, T.STRING):
        if col.length < 256:
            lines = ["l = buf[p]", "p += 1"]
        else:
            lines = ["l = buf[p] | buf[p + 1] << 8", "p += 2"]
        raw = "buf[p:p + l]"
        codec = _codec(col)
        if col.logical in ("uuid", "inet6", "inet4"):
            width = {"uuid": 16, "inet6": 16, "inet4": 4}[col.logical]
            lines.append(f"{v} = _{col.logical}({raw}.ljust({width}, b'\\0'))")
        elif codec is None:
            if t == T.STRING and col.collation == 63:
                # BINARY(n) prints zero-padded to its declared width
                lines.append(f"{v} = {raw}.ljust({col.length}, b'\\0')")
            else:
                lines.append(f"{v} = {raw}")
        else:
            lines.append(f"{v} = {raw}.decode({codec!r})")
        lines.append("p += l")
        return lines
    if t in BLOB_TYPES or t in (T.GEOMETRY, T.JSON, T.VECTOR):
        nb = col.length
        if nb == 1:
            lines = ["l = buf[p]", "p += 1"]
        elif nb == 2:  # TEXT / BLOB: two indexings cost a third less than a slice and from_bytes
            lines = ["l = buf[p] | buf[p + 1] << 8", "p += 2"]
        elif 3 <= nb <= 4:
            lines = [f"l = _from_bytes(buf[p:p + {nb}], 'little')", f"p += {nb}"]
        else:
            raise ValueError(f"{col.type_name} with {nb} length bytes")
        raw = "buf[p:p + l]"
        if t == T.JSON:
            lines.append(f"{v} = _json({raw})")
        elif t == T.VECTOR:
            lines.append(f"{v} = _vector({raw})")
        elif t == T.GEOMETRY:
            lines.append(f"{v} = {raw}")
        else:
            codec = _codec(col)
            lines.append(f"{v} = {raw}" if codec is None else f"{v} = {raw}.decode({codec!r})")
        lines.append("p += l")
        return lines
    raise ValueError(f"column type {col.type_name} ({col.type}) cannot be decoded")


def _codec(col: Column) -> str | None:
    if col.collation is None:
        return None  # unknown charset: keep the bytes rather than guess
    return V.codec_for_collation(col.collation)


def _image(cols: tuple[Column, ...], present: list[int], g: _Gen, indent: str, *,
           partial_json: bool = False) -> list[str]:
    """Code that decodes one row image into variables c<index>, advancing p."""
    out: list[str] = []
    nb = (len(present) + 7) // 8
    if nb == 0:
        return out
    # the unused high bits of the last null byte are padding, written as 1s: mask them off
    mask = (1 << len(present)) - 1
    if nb == 1:
        out.append(f"nb = buf[p] & {mask}")
    elif nb == 2:
        out.append(f"nb = (buf[p] | buf[p + 1] << 8) & {mask}")
    else:
        out.append(f"nb = _from_bytes(buf[p:p + {nb}], 'little') & {mask}")
    out.append(f"p += {nb}")
    if partial_json:
        # after images of PARTIAL_UPDATE_ROWS: JSON columns flagged in `pj` hold diffs, not values
        json_present = [i for i in present if cols[i].type == T.JSON]
    # fast path: no NULLs, merge runs of fixed-width columns into one struct call
    fast: list[str] = []
    run: list[tuple[Column, tuple[str, int, str]]] = []

    def flush() -> None:
        if not run:
            return
        unpack = g.const(struct.Struct("<" + "".join(spec[0] for _, spec in run)).unpack_from, "_s")
        names: list[str] = []
        posts: list[str] = []
        for col, (fmt, size, post) in run:
            if post == "{0}":
                names.append(f"c{col.index}")
            else:
                raw = [f"r{col.index}_{j}" for j in range(_nitems(fmt, size))]
                names.extend(raw)
                posts.append(f"c{col.index} = " + post.format(*raw))
        fast.append(f"{', '.join(names)}, = {unpack}(buf, p)")
        fast.extend(posts)
        fast.append(f"p += {sum(spec[1] for _, spec in run)}")
        run.clear()

    for i in present:
        col = cols[i]
        spec = _fixed(col, g)
        if spec is not None and not (partial_json and col.type == T.JSON):
            run.append((col, spec))
            continue
        flush()
        fast.extend(_var_or_partial(col, f"c{i}", g, partial_json and col.type == T.JSON,
                                    json_present if partial_json else []))
    flush()
    slow: list[str] = []
    for k, i in enumerate(present):
        col = cols[i]
        slow.append(f"if nb & {1 << k}:")
        slow.append(f"    c{i} = None")
        slow.append("else:")
        spec = _fixed(col, g)
        if spec is not None:
            unpack = g.const(struct.Struct("<" + spec[0]).unpack_from, "_s")
            raw_names = [f"r{i}_{j}" for j in range(_nitems(spec[0], spec[1]))]
            slow.append(f"    {', '.join(raw_names)}, = {unpack}(buf, p)")
            slow.append(f"    c{i} = " + spec[2].format(*raw_names))
            slow.append(f"    p += {spec[1]}")
        else:
            slow.extend("    " + line for line in _var_or_partial(
                col, f"c{i}", g, partial_json and col.type == T.JSON, json_present if partial_json else []))
    out.append("if not nb:")
    out.extend("    " + line for line in fast)
    out.append("else:")
    out.extend("    " + line for line in slow)
    return [indent + line for line in out]


def _var_or_partial(col: Column, v: str, g: _Gen, partial: bool, json_present: list[int]) -> list[str]:
    lines = _variable(col, v, g)
    if not partial:
        return lines
    bit = 1 << json_present.index(col.index)
    # a partial JSON value is a diff list against the same column of the before image
    nb = col.length
    head = ["l = buf[p]" if nb == 1 else f"l = _from_bytes(buf[p:p + {nb}], 'little')", f"p += {nb}"]
    return [
        f"if pj & {bit}:",
        *["    " + h for h in head],
        f"    {v} = _apply(b{col.index}, _diffs(buf[p:p + l]))",
        "    p += l",
        "else:",
        *["    " + line for line in lines],
    ]


def build_row_decoder(tdef: TableDef, kind: str, present: bytes, present_after: bytes | None,
                      partial: bool = False) -> RowDecoder:
    """A function (buf, p, end) -> rows for one rows event layout.

    Rows are tuples over all table columns (ABSENT where the image omits a column); updates give
    (before, after) pairs.
    """
    key = (tdef.signature, kind, present, present_after, partial)
    fn = _CACHE.get(key)
    if fn is not None:
        return fn
    cols = tdef.columns
    n = len(cols)
    pres = [i for i in range(n) if present[i >> 3] & (1 << (i & 7))]
    g = _Gen()
    g.ns["_apply"] = _apply_partial
    g.ns["_diffs"] = parse_json_diffs
    g.ns["_read_packed"] = read_packed
    body = ["def rows(buf, p, end):", "    out = []", "    append = out.append"]
    if not pres and (present_after is None or not any(present_after)):
        body += ["    if p < end:", "        raise ValueError('row image with no columns')", "    return out"]
    else:
        body.append("    while p < end:")
        body += _image(cols, pres, g, "        ")
        before = "(" + "".join((f"c{i}, " if i in pres else "_ABSENT, ") for i in range(n)) + ")"
        if kind == "update":
            assert present_after is not None
            pres_a = [i for i in range(n) if present_after[i >> 3] & (1 << (i & 7))]
            body.append(f"        before = {before}")
            if partial:
                for i in pres:
                    if cols[i].type == T.JSON:
                        body.append(f"        b{i} = c{i}")
                for i in pres_a:
                    if cols[i].type == T.JSON and i not in pres:
                        body.append(f"        b{i} = None")
                # value_options, then (with PARTIAL_JSON_UPDATES) one bit per JSON column of the table,
                # consumed in order by the JSON columns the after image carries
                njson = sum(1 for c in cols if c.type == T.JSON)
                body += [
                    "        opts, p = _read_packed(buf, p)",
                    "        if opts & 1:",
                    f"            pj = _from_bytes(buf[p:p + {(njson + 7) // 8}], 'little')",
                    f"            p += {(njson + 7) // 8}",
                    "        else:",
                    "            pj = 0",
                ]
            body += _image(cols, pres_a, g, "        ", partial_json=partial)
            after = "(" + "".join((f"c{i}, " if i in pres_a else "_ABSENT, ") for i in range(n)) + ")"
            body.append(f"        append((before, {after}))")
        else:
            body.append(f"        append({before})")
        body += ["    if p != end:", "        raise ValueError(f'row data ends at {p}, event data at {end}')",
                 "    return out"]
    src = "\n".join(body)
    exec(compile(src, f"<rows {tdef.schema}.{tdef.table}>", "exec"), g.ns)
    fn = g.ns["rows"]
    fn.__source__ = src  # for debugging generated code
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[key] = fn
    return fn
