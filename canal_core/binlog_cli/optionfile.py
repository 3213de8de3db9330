"""Connection settings from a MySQL option file (my.cnf format), for canal-binlog --defaults-file.

A password in an option file stays out of the process list, where a ``--password`` or ``--url`` value is
visible to every user of the machine. The format is MySQL's own: ``[group]`` lines, ``key=value`` (or ``key``
alone), comments from ``#`` or ``;`` at the start of a line and from ``#`` after an unquoted value, values in
single or double quotes, and the escapes ``\\b \\t \\n \\r \\\\ \\s``. Options are read from the groups given
(``[client]``, read by every MySQL client, and the program's own), the last occurrence winning.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..protocol.errors import CanalError

_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "r": "\r", "\\": "\\", "s": " ", "'": "'", '"': '"'}


class OptionFileError(CanalError, ValueError):
    """An option file that cannot be used; the message names the file and line."""


def read_option_file(path: str | os.PathLike[str], groups: tuple[str, ...]) -> dict[str, str]:
    """The options of ``groups`` in the file at ``path``: names lower-cased with ``_`` as ``-``."""
    path = Path(path)
    try:
        st = path.stat()
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise OptionFileError(f"cannot read option file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise OptionFileError(f"option file {path} is not UTF-8 text") from None
    if st.st_mode & stat.S_IWOTH:
        # as MySQL's clients do: anyone could have put another host or user in it
        raise OptionFileError(f"option file {path} is world-writable; make it private (chmod 600 {path})")
    wanted = {g.lower() for g in groups}
    out: dict[str, str] = {}
    current: str | None = None
    for no, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s[0] in "#;":
            continue
        where = f"{path}:{no}"
        if s.startswith("!"):
            raise OptionFileError(f"{where}: {s.split()[0]} is not supported here; put the options in this file")
        if s.startswith("["):
            if not s.endswith("]"):
                raise OptionFileError(f"{where}: a group line must be [name], got {s!r}")
            current = s[1:-1].strip().lower()
            continue
        if current is None:
            raise OptionFileError(f"{where}: an option before any [group] line")
        name, eq, raw = s.partition("=")
        name = name.strip().lower().replace("_", "-")
        if not name:
            raise OptionFileError(f"{where}: an option without a name")
        if current in wanted:
            out[name] = _value(raw, where) if eq else ""
    return out


def _value(raw: str, where: str) -> str:
    raw = raw.strip()
    if raw[:1] in ("'", '"'):
        quote = raw[0]
        chars: list[str] = []
        i = 1
        while i < len(raw):
            c = raw[i]
            if c == "\\" and i + 1 < len(raw):
                chars.append(_ESCAPES.get(raw[i + 1], "\\" + raw[i + 1]))
                i += 2
                continue
            if c == quote:
                rest = raw[i + 1:].strip()
                if rest and rest[0] != "#":
                    raise OptionFileError(f"{where}: text after the closing quote: {rest!r}")
                return "".join(chars)
            chars.append(c)
            i += 1
        raise OptionFileError(f"{where}: a quoted value without its closing {quote}")
    value = raw.split("#", 1)[0].rstrip()
    out: list[str] = []
    i = 0
    while i < len(value):
        if value[i] == "\\" and i + 1 < len(value):
            out.append(_ESCAPES.get(value[i + 1], "\\" + value[i + 1]))
            i += 2
        else:
            out.append(value[i])
            i += 1
    return "".join(out)
