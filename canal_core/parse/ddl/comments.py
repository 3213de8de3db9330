"""Executable comments (``/*!50100 ... */``, ``/*M!100301 ... */``): sqlglot drops them as comments, but
the server executed them, so they are unwrapped before tokenizing."""

from __future__ import annotations

# Version number the executable comments are compared with (MariaDB 10.11 = 101100).
DEFAULT_SERVER_VERSION = 101100


def unwrap_executable_comments(sql: str, server_version: int = DEFAULT_SERVER_VERSION) -> str:
    """Replace ``/*!NNNNN text */`` and ``/*M!NNNNNN text */`` by ``text`` when the server would have
    executed it (no version, or a version <= server_version); drop them otherwise. Quotes and
    ordinary comments are respected."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"`":
            j = _skip_quoted(sql, i)
            out.append(sql[i:j])
            i = j
        elif sql.startswith("/*!", i) or sql.startswith("/*M!", i):
            start = i + (3 if sql[i + 2] == "!" else 4)
            end = _comment_end(sql, start)
            body = sql[start:end]
            digits = 0
            while digits < len(body) and digits < 6 and body[digits].isdigit():
                digits += 1
            if digits >= 5:
                version = int(body[:digits])
                body = body[digits:]
                keep = version <= server_version
            else:
                keep = True
            out.append(" " + (unwrap_executable_comments(body, server_version) if keep else "") + " ")
            i = end + 2
        elif sql.startswith("/*", i):
            end = _comment_end(sql, i + 2)
            out.append(sql[i:end + 2])
            i = end + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _skip_quoted(sql: str, i: int) -> int:
    q = sql[i]
    j = i + 1
    n = len(sql)
    while j < n:
        c = sql[j]
        if c == "\\" and q != "`":
            j += 2
            continue
        if c == q:
            if j + 1 < n and sql[j + 1] == q:
                j += 2
                continue
            return j + 1
        j += 1
    return n


def _comment_end(sql: str, i: int) -> int:
    end = sql.find("*/", i)
    return len(sql) if end < 0 else end

