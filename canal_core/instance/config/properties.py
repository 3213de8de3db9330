"""The Java .properties format: ``canal.properties`` and ``instance.properties`` read into key -> value,
each value with the file and line it came from."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError

CANAL_PROPERTIES = "canal.properties"
INSTANCE_PROPERTIES = "instance.properties"


_WS = " \t\f"
_NEWLINES = re.compile(r"\r\n|\r|\n")
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


@dataclass(frozen=True, slots=True)
class Prop:
    """One property value and where it came from. ``raw``: the text before ``${...}`` expansion."""

    value: str
    source: str  # a file path, "-D", "environment", "built-in" or "default"
    line: int = 0
    raw: str | None = None

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}" if self.line else self.source


@dataclass
class PropertiesFile:
    """A parsed .properties file: key -> Prop (last assignment wins), plus the keys assigned twice."""

    path: str
    props: dict[str, Prop] = field(default_factory=dict)
    duplicates: list[tuple[str, int, int]] = field(default_factory=list)  # (key, first line, later line)

    def values(self) -> dict[str, str]:
        return {k: p.value for k, p in self.props.items()}

    def __contains__(self, key: object) -> bool:
        return key in self.props

    def get(self, key: str) -> str | None:
        p = self.props.get(key)
        return None if p is None else p.value


def _unescape(text: str, source: str, line: int) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        i += 1
        if i >= n:  # a lone trailing backslash (only at end of input): dropped, as Java does
            break
        c = text[i]
        if c == "u":
            digits = text[i + 1:i + 5]
            if len(digits) != 4 or not all(ch in "0123456789abcdefABCDEF" for ch in digits):
                raise ConfigError(f"{source}:{line}: malformed \\uXXXX escape {text[i - 1:i + 5]!r}: expected "
                                  f"four hex digits after \\u", file=source, line=line)
            out.append(chr(int(digits, 16)))
            i += 5
            continue
        out.append(_SIMPLE_ESCAPES.get(c, c))  # \t \n \r \f; any other escaped char stands for itself
        i += 1
    return "".join(out)


def _continues(line: str) -> bool:
    """A line continues on the next when it ends in an odd number of backslashes."""
    k = len(line) - len(line.rstrip("\\"))
    return k % 2 == 1


def parse_properties(text: str, source: str = "<string>") -> PropertiesFile:
    """Parse Java .properties text: ``key=value``, ``key:value`` or ``key value``; ``#`` / ``!`` comment
    lines; a trailing backslash continues the logical line (the next line's leading blanks dropped);
    escapes ``\\t \\n \\r \\f \\uXXXX`` and ``\\x`` = x (so ``\\=``, ``\\:``, ``\\ ``, ``\\\\``); keys
    case-sensitive; leading blanks trimmed; the last assignment of a key wins."""
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = _NEWLINES.split(text)
    result = PropertiesFile(path=source)
    i = 0
    while i < len(lines):
        lineno = i + 1
        logical = lines[i].lstrip(_WS)
        i += 1
        if not logical or logical[0] in "#!":
            continue  # blank and comment lines never continue, even when they end in a backslash
        while _continues(logical):
            logical = logical[:-1]
            if i >= len(lines):
                break
            logical += lines[i].lstrip(_WS)
            i += 1
        key, value = _split_entry(logical)
        key = _unescape(key, source, lineno)
        value = _unescape(value, source, lineno)
        prev = result.props.get(key)
        if prev is not None:
            result.duplicates.append((key, prev.line, lineno))
        result.props[key] = Prop(value, source, lineno)
    return result


def _split_entry(logical: str) -> tuple[str, str]:
    n = len(logical)
    key_end = n
    value_start = n
    has_sep = False
    backslash = False
    j = 0
    while j < n:
        c = logical[j]
        if not backslash:
            if c in "=:":
                key_end, value_start, has_sep = j, j + 1, True
                break
            if c in _WS:
                key_end, value_start = j, j + 1
                break
        backslash = (c == "\\") and not backslash
        j += 1
    while value_start < n:
        c = logical[value_start]
        if c in _WS:
            value_start += 1
        elif not has_sep and c in "=:":
            has_sep = True
            value_start += 1
        else:
            break
    return logical[:key_end], logical[value_start:]


def load_properties(path: str | os.PathLike[str]) -> PropertiesFile:
    """Read and parse a .properties file (UTF-8, falling back to ISO-8859-1 for non-UTF-8 bytes)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file", file=str(p)) from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read ({e.strerror or e})", file=str(p)) from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")
    return parse_properties(text, str(p))

