"""canal-server's log files: size-rotated, one record per line whatever a client sends, and rate limits for
lines a client can cause at will.

- ``setup_server_logging(run_dir, max_bytes, backups)``: ``<run>/canal/canal.log`` and, for the records of a
  destination's threads (``parser-<d>``, ``detect-<d>``), ``<run>/<d>/<d>.log``; every file rotated at
  ``max_bytes`` keeping ``backups`` old ones (canal.log.file.max.bytes / canal.log.file.backups).
- ``LineFormatter``: control characters in a record's message (a user name, a destination or a filter
  sent by a client, quoted in a message or an exception text) are written as ``\\xNN`` escapes, and every
  line of a traceback is indented: only a record's first line starts at column 0, so nothing a client
  sends can forge a record.
- ``LogLimiter``: at most ``per_key`` lines per key (a client address) and ``total`` lines in all per
  ``period``; the next line let through says how many were suppressed.
"""

from __future__ import annotations

import logging
import logging.handlers
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_MAX_BYTES = 100 << 20
DEFAULT_BACKUPS = 5
FORMAT = "%(asctime)s %(levelname)s [%(threadName)s] %(name)s - %(message)s"

# C0, DEL, C1 and the Unicode line/paragraph separators: anything an editor or a log shipper may break a line on
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def escape_controls(text: str) -> str:
    r"""``text`` with every control character as a ``\xNN`` (``\uNNNN``) escape."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)


def peer_text(text: str, limit: int = 200) -> str:
    """A peer-supplied string for a log line: quoted, control characters escaped, at most ``limit`` characters
    of it (a user name may be 64 KiB long)."""
    shown = escape_controls(text[:limit])
    more = f"...({len(text)} characters)" if len(text) > limit else ""
    return f"'{shown}'{more}"


class LineFormatter(logging.Formatter):
    """One line per record, plus indented traceback lines (see the module doc)."""

    def format(self, record: logging.LogRecord) -> str:
        msg, args = record.msg, record.args
        record.msg, record.args = escape_controls(record.getMessage()), None
        try:
            return super().format(record)
        finally:
            record.msg, record.args = msg, args

    def formatException(self, ei: Any) -> str:  # ei: the sys.exc_info() triple logging passes
        return _indent(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _indent(super().formatStack(stack_info))


def _indent(text: str) -> str:
    return "\n".join("\t" + escape_controls(line) for line in text.splitlines())


class LogLimiter:
    """Decides which of many similar lines get logged (thread-safe; bounded: at most ``max_keys`` keys)."""

    def __init__(self, per_key: int = 5, total: int = 50, period: float = 60.0, *, max_keys: int = 4096,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_key = per_key
        self.total = total
        self.period = period
        self.max_keys = max_keys
        self._clock = clock
        self._keys: OrderedDict[str, tuple[float, int]] = OrderedDict()  # key -> (window start, lines)
        self._window = (clock(), 0)
        self._suppressed = 0
        self._lock = threading.Lock()

    def allow(self, key: str) -> tuple[bool, int]:
        """(log this line?, lines suppressed since the last one logged: to be reported on this one)."""
        with self._lock:
            now = self._clock()
            start, n = self._window
            if now - start >= self.period:
                start, n = now, 0
            kstart, kn = self._keys.pop(key, (now, 0))
            if now - kstart >= self.period:
                kstart, kn = now, 0
            ok = n < self.total and kn < self.per_key
            if ok:
                n, kn = n + 1, kn + 1
            self._window = (start, n)
            self._keys[key] = (kstart, kn)
            while len(self._keys) > self.max_keys:
                self._keys.popitem(last=False)
            if not ok:
                self._suppressed += 1
                return False, 0
            dropped, self._suppressed = self._suppressed, 0
            return True, dropped

    def log(self, logger: logging.Logger, level: int, key: str, msg: str, *args: object) -> None:
        ok, dropped = self.allow(key)
        if ok:
            if dropped:
                msg += " (%d similar lines suppressed before this one)"
                args = (*args, dropped)
            logger.log(level, msg, *args)


class _DestinationLogs(logging.Handler):
    """Route records of a destination's threads (parser-<d>, detect-<d>) to <run>/<d>/<d>.log."""

    def __init__(self, run_dir: Path, fmt: logging.Formatter, max_bytes: int, backups: int) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.fmt = fmt
        self.max_bytes = max_bytes
        self.backups = backups
        self.files: dict[str, logging.Handler] = {}

    def emit(self, record: logging.LogRecord) -> None:
        name = record.threadName or ""
        for prefix in ("parser-", "detect-"):
            if name.startswith(prefix):
                dest = name[len(prefix):]
                try:
                    h = self.files.get(dest)
                    if h is None:
                        (self.run_dir / dest).mkdir(parents=True, exist_ok=True)
                        h = _rotating(self.run_dir / dest / f"{dest}.log", self.fmt, self.max_bytes, self.backups)
                        self.files[dest] = h
                    h.handle(record)
                except Exception:  # e.g. EMFILE: a log line is not worth the caller's thread
                    self.handleError(record)
                return

    def resize(self, max_bytes: int, backups: int) -> None:
        self.max_bytes, self.backups = max_bytes, backups
        for h in self.files.values():
            _set_rotation(h, max_bytes, backups)


def _rotating(path: Path, fmt: logging.Formatter, max_bytes: int, backups: int) -> logging.Handler:
    h = logging.handlers.RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
    h.setFormatter(fmt)
    return h


def _set_rotation(h: logging.Handler, max_bytes: int, backups: int) -> None:
    if isinstance(h, logging.handlers.RotatingFileHandler):
        h.maxBytes, h.backupCount = max_bytes, backups


class ServerLogs:
    """The handlers ``setup_server_logging`` installed, to apply canal.properties' sizes once it is read."""

    def __init__(self, server: logging.Handler, destinations: _DestinationLogs) -> None:
        self.server = server
        self.destinations = destinations

    def resize(self, max_bytes: int, backups: int) -> None:
        _set_rotation(self.server, max_bytes, backups)
        self.destinations.resize(max_bytes, backups)


def setup_server_logging(run_dir: Path, max_bytes: int = DEFAULT_MAX_BYTES,
                         backups: int = DEFAULT_BACKUPS) -> ServerLogs:
    (run_dir / "canal").mkdir(parents=True, exist_ok=True)
    fmt = LineFormatter(FORMAT)
    server = _rotating(run_dir / "canal" / "canal.log", fmt, max_bytes, backups)
    dests = _DestinationLogs(run_dir, fmt, max_bytes, backups)
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(server)
    root.addHandler(dests)
    return ServerLogs(server, dests)
