"""PARTIAL_UPDATE_ROWS JSON diffs: parsing the diff vector of a JSON column and applying it to the before
image's text.

A diff is ``operation(1) path_length(packed) path [value_length(packed) binary_json]`` (Json_diff::write_binary);
REMOVE carries no value. Paths hold only object members and array cells, the legs a diff can name. The result of
applying diffs is the document as MySQL prints it (jsonb.py), members in the order the server keeps them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from .jsonb import JsonDecodeError, json_to_text, quote_json_string

__all__ = ["JsonDiff", "JsonDiffOperation", "apply_json_diffs", "parse_json_diffs"]


class JsonDiffOperation(IntEnum):
    """enum_json_diff_operation."""

    REPLACE = 0
    INSERT = 1
    REMOVE = 2


@dataclass(frozen=True, slots=True)
class JsonDiff:
    """One logical change to a JSON column: an operation at a path, with the new value for
    REPLACE/INSERT (``value`` binary, ``value_text`` as MySQL prints it)."""

    operation: JsonDiffOperation
    path: str
    value: bytes | None = None
    value_text: str | None = None


def _read_packed(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """net_field_length_checked(): 1, 3, 4 or 9 bytes; 251 (NULL) is not a valid length here."""
    if pos >= end:
        raise JsonDecodeError("JSON diff: length runs past the end")
    b = buf[pos]
    if b < 251:
        return b, pos + 1
    if b == 251:
        raise JsonDecodeError(f"JSON diff: NULL length at offset {pos}")
    width = 2 if b == 252 else 3 if b == 253 else 8
    if pos + 1 + width > end:
        raise JsonDecodeError("JSON diff: length runs past the end")
    return int.from_bytes(buf[pos + 1:pos + 1 + width], "little"), pos + 1 + width


def parse_json_diffs(data: bytes | bytearray | memoryview) -> list[JsonDiff]:
    """The diffs of one JSON column in a PARTIAL_UPDATE_ROWS after image.

    ``data`` is the column's diff vector after its uint32 length: repeated
    ``operation(1) path_length(packed) path [value_length(packed) binary_json]`` where REMOVE has
    no value (Json_diff::write_binary).
    """
    buf = data if type(data) is bytes else bytes(data)
    end = len(buf)
    pos = 0
    diffs: list[JsonDiff] = []
    while pos < end:
        op = buf[pos]
        if op > JsonDiffOperation.REMOVE:
            raise JsonDecodeError(f"JSON diff: unknown operation {op} at offset {pos}")
        plen, pos = _read_packed(buf, pos + 1, end)
        if pos + plen > end:
            raise JsonDecodeError(f"JSON diff: path of {plen} bytes at offset {pos} runs past the end")
        try:
            path = buf[pos:pos + plen].decode("utf-8")
        except UnicodeDecodeError:
            raise JsonDecodeError(f"JSON diff: path at offset {pos} is not valid UTF-8") from None
        _parse_path(path)  # validate now, as the server does when it reads the event
        pos += plen
        if op == JsonDiffOperation.REMOVE:
            diffs.append(JsonDiff(JsonDiffOperation.REMOVE, path))
            continue
        vlen, pos = _read_packed(buf, pos, end)
        if pos + vlen > end:
            raise JsonDecodeError(f"JSON diff: value of {vlen} bytes at offset {pos} runs past the end")
        value = buf[pos:pos + vlen]
        pos += vlen
        diffs.append(JsonDiff(JsonDiffOperation(op), path, value, json_to_text(value)))
    return diffs


# Path legs: a str is an object member, an int an array cell, ("last", n) the cell n from the end.
_Leg = str | int | tuple[str, int]

_PATH_WS = " \t\n\r"


def _parse_path(path: str) -> list[_Leg]:
    """The legs of a JSON path made only of members and array cells (what diffs carry)."""
    n = len(path)
    i = 0
    while i < n and path[i] in _PATH_WS:
        i += 1
    if i >= n or path[i] != "$":
        raise JsonDecodeError(f"JSON diff: path {path!r} does not start with '$'")
    i += 1
    legs: list[_Leg] = []
    while True:
        while i < n and path[i] in _PATH_WS:
            i += 1
        if i >= n:
            return legs
        c = path[i]
        if c == ".":
            i += 1
            while i < n and path[i] in _PATH_WS:
                i += 1
            if i < n and path[i] == '"':
                j = i + 1
                while j < n and path[j] != '"':
                    j += 2 if path[j] == "\\" else 1
                if j >= n:
                    raise JsonDecodeError(f"JSON diff: unterminated member name in path {path!r}")
                try:
                    name = json.loads(path[i:j + 1])
                except ValueError:
                    raise JsonDecodeError(f"JSON diff: bad quoted member name in path {path!r}") from None
                legs.append(name)
                i = j + 1
            else:
                j = i
                while j < n and path[j] not in ".[*" and path[j] not in _PATH_WS:
                    j += 1
                if j == i:
                    raise JsonDecodeError(f"JSON diff: wildcard or empty member name in path {path!r}")
                legs.append(path[i:j])
                i = j
        elif c == "[":
            j = path.find("]", i)
            if j < 0:
                raise JsonDecodeError(f"JSON diff: unterminated array index in path {path!r}")
            inner = path[i + 1:j].strip(_PATH_WS)
            if inner.isascii() and inner.isdigit():
                legs.append(int(inner))
            elif inner.startswith("last"):
                rest = inner[4:].strip(_PATH_WS)
                num = rest[1:].strip(_PATH_WS)
                if not rest:
                    legs.append(("last", 0))
                elif rest[0] == "-" and num.isascii() and num.isdigit():
                    legs.append(("last", int(num)))
                else:
                    raise JsonDecodeError(f"JSON diff: bad array index in path {path!r}")
            else:
                raise JsonDecodeError(f"JSON diff: bad or wildcard array index in path {path!r}")
            i = j + 1
        else:
            raise JsonDecodeError(f"JSON diff: unexpected {c!r} in path {path!r}")


class _Num(str):
    """A number kept as the exact text MySQL printed (big integers, DECIMALs, doubles)."""

    __slots__ = ()


class _Obj(list[list[Any]]):
    """An object as an ordered list of [key, value] pairs."""

    __slots__ = ()


def _pairs(pairs: list[tuple[str, object]]) -> _Obj:
    return _Obj([k, v] for k, v in pairs)


def _load(text: str) -> object:
    try:
        return json.loads(text, object_pairs_hook=_pairs, parse_int=_Num, parse_float=_Num,
                          parse_constant=_Num)
    except (ValueError, RecursionError) as e:
        raise JsonDecodeError(f"JSON diff: before image is not JSON text ({e})") from None


def _index(leg: int | tuple[str, int], size: int) -> tuple[int, bool]:
    """Json_path_leg::first_array_index(): (position, within bounds)."""
    if isinstance(leg, int):
        return leg, leg < size
    k = size - 1 - leg[1]
    return (k, True) if k >= 0 else (0, False)


def _seek(doc: object, legs: list[_Leg]) -> object | None:
    """seek_exact_path(): members in objects, cells in arrays, no auto-wrapping."""
    for leg in legs:
        if isinstance(doc, _Obj):
            if not isinstance(leg, str):
                return None
            for pair in doc:
                if pair[0] == leg:
                    doc = pair[1]
                    break
            else:
                return None
        elif isinstance(doc, list):
            if isinstance(leg, str):
                return None
            k, ok = _index(leg, len(doc))
            if not ok:
                return None
            doc = doc[k]
        else:
            return None
    return doc


def _key_order(key: str) -> tuple[int, bytes]:
    # Json_key_comparator: shorter keys first, then bytewise
    b = key.encode("utf-8")
    return len(b), b


def _dump(v: object, out: list[str]) -> None:
    if isinstance(v, _Num):
        out.append(str(v))
    elif isinstance(v, str):
        out.append(quote_json_string(v))
    elif v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, _Obj):
        # the after image is a DOM, which MySQL keeps (and prints) in key order
        out.append("{")
        for i, (k, x) in enumerate(sorted(v, key=lambda p: _key_order(p[0]))):
            if i:
                out.append(", ")
            out.append(quote_json_string(k))
            out.append(": ")
            _dump(x, out)
        out.append("}")
    elif isinstance(v, list):
        out.append("[")
        for i, x in enumerate(v):
            if i:
                out.append(", ")
            _dump(x, out)
        out.append("]")
    else:  # pragma: no cover - _load builds nothing else
        raise TypeError(type(v))


def apply_json_diffs(before_text: str | None, diffs: list[JsonDiff]) -> str:
    """The after image of a partially updated JSON column, printed as MySQL prints it.

    ``before_text`` is the column's before image as json_to_text() printed it. Follows the
    server's apply_json_diffs(): REPLACE needs an existing value at the path; INSERT adds a new
    object member (which must not exist) or inserts into an array (past the end appends);
    REMOVE deletes an existing member or cell. A diff the server would reject raises
    JsonDecodeError.
    """
    if before_text is None:
        raise JsonDecodeError("JSON diff: the before image has no value for this column (SQL NULL "
                              "or not logged), so the partial update can not be applied")
    if not diffs:
        return before_text
    doc = _load(before_text)
    for diff in diffs:
        legs = _parse_path(diff.path)
        if not legs:
            raise JsonDecodeError(f"JSON diff: can not {diff.operation.name} the document root")
        op = diff.operation
        parent = _seek(doc, legs[:-1])
        last = legs[-1]
        if op == JsonDiffOperation.REPLACE or op == JsonDiffOperation.INSERT:
            text = diff.value_text if diff.value_text is not None else json_to_text(diff.value or b"")
            new = _load(text)
        if op == JsonDiffOperation.REPLACE:
            if isinstance(parent, _Obj) and isinstance(last, str):
                for pair in parent:
                    if pair[0] == last:
                        pair[1] = new
                        break
                else:
                    raise JsonDecodeError(f"JSON diff: REPLACE path {diff.path} does not exist")
            elif isinstance(parent, list) and not isinstance(parent, _Obj) and not isinstance(last, str):
                k, ok = _index(last, len(parent))
                if not ok:
                    raise JsonDecodeError(f"JSON diff: REPLACE path {diff.path} does not exist")
                parent[k] = new
            else:
                raise JsonDecodeError(f"JSON diff: REPLACE path {diff.path} does not exist")
        elif op == JsonDiffOperation.INSERT:
            if isinstance(parent, _Obj) and isinstance(last, str):
                if any(pair[0] == last for pair in parent):
                    raise JsonDecodeError(f"JSON diff: INSERT path {diff.path} already exists")
                parent.append([last, new])
            elif isinstance(parent, list) and not isinstance(parent, _Obj) and not isinstance(last, str):
                k, _ = _index(last, len(parent))
                parent.insert(min(k, len(parent)), new)
            else:
                raise JsonDecodeError(f"JSON diff: INSERT path {diff.path} has no object or array parent")
        else:
            if isinstance(parent, _Obj) and isinstance(last, str):
                for j, pair in enumerate(parent):
                    if pair[0] == last:
                        del parent[j]
                        break
                else:
                    raise JsonDecodeError(f"JSON diff: REMOVE path {diff.path} does not exist")
            elif isinstance(parent, list) and not isinstance(parent, _Obj) and not isinstance(last, str):
                k, ok = _index(last, len(parent))
                if not ok:
                    raise JsonDecodeError(f"JSON diff: REMOVE path {diff.path} does not exist")
                del parent[k]
            else:
                raise JsonDecodeError(f"JSON diff: REMOVE path {diff.path} does not exist")
    out: list[str] = []
    _dump(doc, out)
    return "".join(out)
