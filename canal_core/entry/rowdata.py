"""The RowData bytes of a ROWDATA entry, column by column (the generic path, which the generated encoders of
``rowcodegen`` must match byte for byte): each Column's index, sqlType, name, isKey, updated, isNull, value
and mysqlType, with the constant fragments of a column computed once per table layout."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..binlog.rows import ABSENT
from ..parse.model import EVENT_INSERT, EVENT_UPDATE
from ..protocol import wire as W
from .columns import Fast, Fmt

# --- Column fields ---------------------------------------------------------------------------

_ISNULL_FALSE = W.field_oneof_int(6, 0)
_ISNULL_TRUE = W.field_oneof_int(6, 1)
_UPDATED = W.field_int(5, 1)
_IS_KEY = W.field_int(4, 1)
_SQLTYPE_F: dict[int, bytes] = {}
_VALUE_KEY = W.key(8, W.LEN)
BEFORE_KEY = W.key(1, W.LEN)
AFTER_KEY = W.key(2, W.LEN)
ROWDATA_KEY = W.key(12, W.LEN)
_varint = W.varint


def _sqltype_f(code: int) -> bytes:
    f = _SQLTYPE_F.get(code)
    if f is None:
        f = _SQLTYPE_F[code] = W.field_int(2, code)
    return f

# key, body up to the value's length field, body length without the value and its length, head of ""
HeadInfo = tuple[bytes, bytes, int, bytes]


class ColPlan:
    """One column's formatter and its constant protobuf fragments."""

    __slots__ = ("_heads", "fast", "fmt", "head", "index", "mid", "null_pre", "pre", "tail")

    def __init__(self, index: int, fmt: Fmt, null_type: int, name: str, is_key: bool, mysql_type: str,
                 fast: Fast | None = None) -> None:
        self.index = index
        self.fmt = fmt
        self.fast = fast
        self.head = W.field_int(1, index)
        self.mid = W.field_str(3, name) + (_IS_KEY if is_key else b"")
        self.tail = W.field_str(10, mysql_type)
        self.pre: dict[int, bytes] = {}  # sqlType -> index + sqlType + name + isKey fields
        self.null_pre = self.prefix(null_type)
        self._heads: dict[tuple[int, bytes, bool], tuple[dict[int, bytes], HeadInfo]] = {}

    def prefix(self, sql_type: int) -> bytes:
        p = self.pre.get(sql_type)
        if p is None:
            p = self.pre[sql_type] = self.head + _sqltype_f(sql_type) + self.mid
        return p

    def heads(self, sql_type: int, key: bytes, updated: bool) -> tuple[dict[int, bytes], HeadInfo]:
        """For generated encoders: (heads, info). heads[n] (n < 128, filled by _head as lengths show
        up) is what precedes a value of n bytes in a non-NULL Column field: ``key``, the field's
        length and the Column's fields up to the value's length."""
        k = (sql_type, key, updated)
        h = self._heads.get(k)
        if h is None:
            pre = self.prefix(sql_type) + (_UPDATED if updated else b"")
            prefix = pre + _ISNULL_FALSE_VALUE
            empty = pre + _ISNULL_FALSE  # an empty text has no value field
            h = self._heads[k] = ({}, (key, prefix, len(prefix) + len(self.tail),
                                       key + _varint(len(empty) + len(self.tail)) + empty))
        return h

    def null_head(self, key: bytes, updated: bool) -> bytes:
        """A NULL Column field without its tail."""
        body = self.null_pre + (_UPDATED if updated else b"") + _ISNULL_TRUE
        return key + _varint(len(body) + len(self.tail)) + body



LEN1 = [bytes([i]) for i in range(128)]
NOT_UPDATED, ALL_UPDATED, COMPARE = 0, 1, 2
_ISNULL_FALSE_VALUE = _ISNULL_FALSE + _VALUE_KEY


def encode_rows(plans: Sequence[ColPlan], et: int, rows: list[Any]) -> bytes:
    out = []
    for row in rows:
        if et == EVENT_UPDATE:
            before, after = row
            texts: dict[int, str | None] = {}
            parts = _encode_image(plans, before, BEFORE_KEY, NOT_UPDATED, texts)
            parts += _encode_image(plans, after, AFTER_KEY, COMPARE, texts)
        elif et == EVENT_INSERT:
            parts = _encode_image(plans, row, AFTER_KEY, ALL_UPDATED, None)
        else:
            parts = _encode_image(plans, row, BEFORE_KEY, NOT_UPDATED, None)
        rd = b"".join(parts)
        n = len(rd)
        out.append(ROWDATA_KEY)
        out.append(LEN1[n] if n < 128 else _varint(n))
        out.append(rd)
    return b"".join(out)


def _encode_image(plans: Sequence[ColPlan], image: Sequence[Any], key: bytes, mode: int,
                  texts: dict[int, str | None] | None) -> list[bytes]:
    """The Column fields (key, length, body) of one row image. ``mode``: updated=false everywhere
    (before images, deletes), true everywhere (inserts: no before image), or true where the text
    differs from ``texts`` (the before image's, by index; filled when mode is not COMPARE)."""
    out: list[bytes] = []
    append = out.append
    fill = texts is not None and mode != COMPARE
    known: dict[int, str | None] = {} if texts is None else texts
    for plan, v in zip(plans, image, strict=False):
        if v is ABSENT:
            continue
        if v is None:
            text = None
            pre = plan.null_pre
        else:
            st, text = plan.fmt(v)
            pre = plan.pre.get(st) or plan.prefix(st)
        if fill:
            known[plan.index] = text
        if mode == NOT_UPDATED:
            upd = b""
        elif mode == ALL_UPDATED:
            upd = _UPDATED
        else:
            i = plan.index
            upd = b"" if (i in known and known[i] == text) else _UPDATED
        if text is None:
            body = b"".join((pre, upd, _ISNULL_TRUE, plan.tail))
        elif text:
            vb = text.encode("utf-8", "replace")
            n = len(vb)
            body = b"".join((pre, upd, _ISNULL_FALSE_VALUE, LEN1[n] if n < 128 else _varint(n), vb, plan.tail))
        else:
            body = b"".join((pre, upd, _ISNULL_FALSE, plan.tail))
        n = len(body)
        append(key)
        append(LEN1[n] if n < 128 else _varint(n))
        append(body)
    return out

