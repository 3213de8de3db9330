"""Row encoders generated per table layout and event type: the same bytes as ``rowdata.encode_rows``, at
about a third of the work once a layout is busy."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from ..binlog.rows import ABSENT
from ..parse.model import EVENT_INSERT, EVENT_UPDATE
from ..protocol import wire as W
from .columns import Fast
from .rowdata import (
    AFTER_KEY,
    ALL_UPDATED,
    BEFORE_KEY,
    COMPARE,
    LEN1,
    NOT_UPDATED,
    ROWDATA_KEY,
    ColPlan,
    HeadInfo,
    encode_rows,
)

_varint = W.varint


class TablePlan:
    """A table layout's column plans and its generated row encoders, one per event type.

    An encoder is generated once the layout has had GENERATE_AFTER_ROWS rows of its event type:
    compiling one costs about what it saves on ~100 rows, so tables that see a few rows (or keep
    falling out of the caches) stay on the generic path and cost neither compile time nor memory."""

    __slots__ = ("cols", "encoders", "seen")

    def __init__(self, cols: list[ColPlan]) -> None:
        self.cols = cols
        self.encoders: dict[int, Callable[[list[Any]], bytes]] = {}
        self.seen: dict[int, int] = {}  # rows encoded by the generic path, by event type

    def encode(self, et: int, rows: list[Any]) -> bytes:
        fn = self.encoders.get(et)
        if fn is None:
            seen = self.seen.get(et, 0) + len(rows)
            if seen < GENERATE_AFTER_ROWS:
                self.seen[et] = seen
                return encode_rows(self.cols, et, rows)
            fn = self.encoders[et] = build_encoder(self.cols, et)
        return fn(rows)


GENERATE_AFTER_ROWS = 64


# --- generated row encoders -----------------------------------------------------------------------
#
# _encode_image pays a formatter call, a tuple, dict lookups and two joins per column: ~3x the work of
# the encoders below, which are generated per table layout and event type (kept in its TablePlan)
# and write the same bytes. Each column's usual value type is formatted inline (_fast_code); all that
# precedes a value (Column key and length, index, sqlType, name, isKey, updated, isNull, value key and
# length) is one table lookup by value length (ColPlan.heads), the tail (mysqlType) a constant; a
# row is one join. Other value types, and types without an inline form, go through the column's
# formatter as _encode_image does, which stays the reference (tests/unit/test_entry_encoder_generated).

def _head(heads: dict[int, bytes], info: HeadInfo, n: int) -> bytes:
    """heads[n], computed (and kept when n < 128: the table stays small) from info = ColPlan.heads()[1]."""
    key, prefix, const, empty = info
    if n:
        ln = _varint(n)
        h = key + _varint(const + len(ln) + n) + prefix + ln
    else:
        h = empty
    if n < 128:
        heads[n] = h
    return h


def _join_present(parts: tuple[Any, ...]) -> bytes:
    """Row data from (head, value, tail) triples, leaving out ABSENT columns (head None)."""
    return b"".join(b"".join(parts[i:i + 3]) for i in range(0, len(parts), 3) if parts[i] is not None)


_ROWDATA_HEAD = [ROWDATA_KEY + LEN1[n] for n in range(128)]
_ROWDATA_LOW = [ROWDATA_KEY + bytes([n | 0x80]) for n in range(128)]  # + the second byte of a length < 16384
_D2 = [f"{i:02d}" for i in range(100)]
_D3 = [f"{i:03d}" for i in range(1000)]
_ENCODE_REPLACE = '.encode("utf-8", "replace")'  # Java writes unpaired surrogates as '?'


def _datetime_code(x: str, fsp: int) -> str:
    """_datetime_text of datetime ``x`` (with ``y``, ``us`` its year and microsecond): isoformat goes
    through printf, table lookups cost half."""
    text = (f"{{_D2[y // 100]}}{{_D2[y % 100]}}-{{_D2[{x}.month]}}-{{_D2[{x}.day]}} "
            f"{{_D2[{x}.hour]}}:{{_D2[{x}.minute]}}:{{_D2[{x}.second]}}")
    if not fsp:
        return f'f"{text}"'
    if fsp == 3:
        return f'f"{text}.{{_D3[us // 1000]}}"'
    code = f'f"{text}.{{_D3[us // 1000]}}{{_D3[us % 1000]}}"'
    return code if fsp >= 6 else f"{code}[:{20 + fsp}]"


def _fast_code(fast: Fast, v: str, name: Callable[[Any], str]) -> tuple[str, list[str], str]:
    """(guard on ``v``, statements leaving the text in ``t``, how to encode ``t``) for one Fast; the
    guard selects the value type (exact class) and range for which the text is the formatter's."""
    kind, arg = fast.kind, fast.arg
    if kind == "int":  # _int_fmt: a value of the signed range prints as is
        return f"{v}.__class__ is int and {v} < {arg}", [f"t = str({v})"], ".encode()"
    if kind == "uint":  # values from the upper half move up one sqlType: left to the formatter
        return f"{v}.__class__ is int and 0 <= {v} < {arg}", [f"t = str({v})"], ".encode()"
    if kind == "decimal":  # the column's decimal_text (its scale decides which zero digits are written)
        return f"{v}.__class__ is _Decimal", [f"t = {name(arg)}({v})"], ".encode()"
    if kind == "double":
        # Double.toString prints this range plainly, with repr's digits (the shortest that round-trip);
        # its extra rule for 1-digit results (also weigh 2-digit decimals) only matters where doubles
        # are coarser than 10**(k-1) around d * 10**k, i.e. for subnormals
        return (f"{v}.__class__ is float and (0.001 <= {v} < 1e7 or -1e7 < {v} <= -0.001)", [f"t = repr({v})"],
                ".encode()")
    if kind == "bit":
        return f"{v}.__class__ is int", [f"t = str({v})"], ".encode()"
    if kind in ("datetime", "timestamp"):
        if kind == "timestamp":
            fsp, tz = arg
            first = [f"x = {v}.astimezone({name(tz)})" if tz is not None else f"x = {v}.astimezone()"]
            x = "x"
        else:
            fsp, first, x = arg, [], v
        frac = [f"us = {x}.microsecond"] if fsp else []
        return (f"{v}.__class__ is _datetime", [*first, f"y = {x}.year", *frac, f"t = {_datetime_code(x, fsp)}"],
                ".encode()")
    if kind == "date":
        return (f"{v}.__class__ is _date",
                [f"y = {v}.year", f'''t = f"{{_D2[y // 100]}}{{_D2[y % 100]}}-{{_D2[{v}.month]}}-{{_D2[{v}.day]}}"'''],
                ".encode()")
    if kind == "enum":  # value text -> its 1-based index as text; anything else misses (str keys)
        return f"(t := {name(arg)}.get({v})) is not None", [], ".encode()"
    if kind == "str":
        return f"{v}.__class__ is str", [f"t = {v}"], _ENCODE_REPLACE
    if kind == "latin1":  # one char per byte: never a surrogate
        return f"{v}.__class__ is bytes", [f"t = {v}.decode('latin-1')"], ".encode()"
    raise AssertionError(kind)


def build_encoder(plans: Sequence[ColPlan], et: int) -> Callable[[list[Any]], bytes]:
    """rows -> the RowData fields of a ROWDATA RowChange, as encode_rows(plans, et, rows)."""
    ns: dict[str, Any] = {"_ABSENT": ABSENT, "_Decimal": Decimal, "_datetime": _dt.datetime, "_date": _dt.date,
                          "_head": _head, "_join": _join_present, "_D2": _D2, "_D3": _D3,
                          "_RDH": _ROWDATA_HEAD, "_RDL": _ROWDATA_LOW, "LEN1": LEN1, "_RDK": ROWDATA_KEY,
                          "_varint": _varint, "_generic": lambda row: encode_rows(plans, et, [row])}
    names: dict[int, str] = {}

    def name(obj: Any) -> str:
        n = names.get(id(obj))
        if n is None:
            n = names[id(obj)] = f"_k{len(names)}"
            ns[n] = obj
        return n

    ncols = len(plans)

    def image(vs: str, slot: int, key: bytes, mode: int, record: bool) -> list[str]:
        """Code setting h<slot+i>, b<slot+i> (head or None for ABSENT, value bytes) for every column;
        ``record``: keep each text in tb<i> (None for NULL) for the after image's updated flags."""
        out: list[str] = []
        compare = mode == COMPARE
        for i, plan in enumerate(plans):
            v, h, b = f"{vs}{i}", f"h{slot + i}", f"b{slot + i}"
            keep = [f"    tb{i} = t"] if record else []
            if plan.fast is not None:
                guard, stmts, enc = _fast_code(plan.fast, v, name)
                st = plan.fast.sql_type
                out.append(f"if {guard}:")
                if len(stmts) == 1 and stmts[0].startswith("t = ") and not (record or compare):
                    out.append(f"    {b} = ({stmts[0][4:]}){enc}")
                else:
                    out += ["    " + line for line in stmts] + keep + [f"    {b} = t{enc}"]
                if compare:  # updated unless the before image had the same text
                    same, diff = plan.heads(st, key, False), plan.heads(st, key, True)
                    out += [f"    ht, hi = {name(same)} if t == tb{i} else {name(diff)}", "    try:",
                            f"        {h} = ht[len({b})]", "    except KeyError:",
                            f"        {h} = _head(ht, hi, len({b}))"]
                else:
                    ht, hi = plan.heads(st, key, mode == ALL_UPDATED)
                    out += ["    try:", f"        {h} = {name(ht)}[len({b})]", "    except KeyError:",
                            f"        {h} = _head({name(ht)}, {name(hi)}, len({b}))"]
                out.append(f"elif {v} is None:")
            else:
                out.append(f"if {v} is None:")
            if compare:  # NULL after NULL is not an update
                same_null, diff_null = plan.null_head(key, False), plan.null_head(key, True)
                out.append(f"    {h} = {name(same_null)} if tb{i} is None else {name(diff_null)}")
            else:
                out.append(f"    {h} = {name(plan.null_head(key, mode == ALL_UPDATED))}")
            out += [f"    {b} = b''", *([f"    tb{i} = None"] if record else [])]
            out += [f"elif {v} is _ABSENT:", f"    {h} = None", f"    {b} = b''", "    absent = True",
                    *([f"    tb{i} = _ABSENT"] if record else [])]
            upd = f"t != tb{i}" if compare else str(mode == ALL_UPDATED)
            out += ["else:", f"    st, t = {name(plan.fmt)}({v})", *keep, f"    {b} = t{_ENCODE_REPLACE}",
                    f"    ht, hi = {name(plan)}.heads(st, {key!r}, {upd})", f"    n = len({b})",
                    f"    {h} = ht.get(n) or _head(ht, hi, n)"]
        return out

    def unpack(vs: str, row: str) -> str:
        return f"{', '.join(f'{vs}{i}' for i in range(ncols))}, = {row}"

    def triples(slot: int) -> list[str]:
        return [f"h{slot + i}, b{slot + i}, {plans[i].tail!r}" for i in range(ncols)]

    if et == EVENT_UPDATE:
        head = ["before, after = r", unpack("v", "before"), unpack("w", "after")]
        body = image("v", 0, BEFORE_KEY, NOT_UPDATED, True) + image("w", ncols, AFTER_KEY, COMPARE, False)
        parts = triples(0) + triples(ncols)
    else:
        head = [unpack("v", "r")]
        if et == EVENT_INSERT:
            body = image("v", 0, AFTER_KEY, ALL_UPDATED, False)
        else:
            body = image("v", 0, BEFORE_KEY, NOT_UPDATED, False)
        parts = triples(0)
    src = "\n".join([
        "def encode(rows):",
        "    out = []",
        "    for r in rows:",
        "        try:",
        *("            " + line for line in head),
        "        except (TypeError, ValueError):  # not a row of this layout: as encode_rows does",
        "            out.append(_generic(r))",
        "            continue",
        "        absent = False",
        *("        " + line for line in body),
        f"        p = ({', '.join(parts)},)",
        "        rd = _join(p) if absent else b''.join(p)",
        "        n = len(rd)",
        "        if n < 128:",
        "            out.append(_RDH[n])",
        "        elif n < 16384:",
        "            out.append(_RDL[n & 127] + LEN1[n >> 7])",
        "        else:",
        "            out.append(_RDK + _varint(n))",
        "        out.append(rd)",
        "    return b''.join(out)",
    ])
    exec(compile(src, "<entry encoder>", "exec"), ns)
    fn = ns["encode"]
    fn.__source__ = src  # for debugging generated code
    return fn
