"""What a parser is doing now, for its callers: an immutable snapshot, and what kind of error holds it up.

States (``ParserState``):

  connecting  started (or switched source), no event read from a dump yet
  streaming   a dump delivers events; an earlier error is cleared (kept in ``last_error`` with its time)
  retrying    a dump or its start failed; the parser tries again after a back-off
  stopped     the parser ended: by ``stop()`` (no error), or on an error retrying cannot fix

Error kinds (``classify``, a pure function of the exception, so callers and tests need no server):

  access           the server refused the account: wrong password, missing GRANT (1045, 1044, 1142, 1227, ...)
  unreachable      connection refused or timed out, name not resolved, the connection dropped
  source-mismatch  another server answers at the source's address (``SourceMismatchError``)
  needs-person     retrying cannot fix it: schema history, start position, binlog off or not ROW, TLS, a
                   binlog the decoder cannot read
  other            anything else

``HealthTracker`` holds the current snapshot; the parser thread moves it, any thread reads it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import pymysql

from ..binlog.errors import BinlogError
from ..mysql import (
    BinlogFormatError,
    BinlogNotEnabledError,
    BinlogPositionError,
    ConnectionLostError,
    MissingPrivilegeError,
    PacketTooLargeError,
    ReplicationAuthError,
    ReplicationError,
    ReplicationTLSError,
    ServerUnreachableError,
)
from ..mysql.errors import CONNECTION_GONE_CODES
from .identity import SourceMismatchError
from .model import SchemaHistoryError
from .start_errors import StartPositionError

# Server / client error codes of refused accounts: access denied (1045, 1698), no access to a database or
# table (1044, 1142), a missing privilege (1227), an auth method the client cannot speak (1251, 2059).
ACCESS_CODES = frozenset({1044, 1045, 1142, 1227, 1251, 1698, 2059})
# Client codes of a server that cannot be reached: refused / no route (2003), unknown host (2005), gone (2006,
# 2013), and the codes of a connection the server ended.
UNREACHABLE_CODES = frozenset({2003, 2005}) | CONNECTION_GONE_CODES


class ParserState(StrEnum):
    CONNECTING = "connecting"
    STREAMING = "streaming"
    RETRYING = "retrying"
    STOPPED = "stopped"


class ErrorKind(StrEnum):
    ACCESS = "access"
    UNREACHABLE = "unreachable"
    SOURCE_MISMATCH = "source-mismatch"
    NEEDS_PERSON = "needs-person"
    OTHER = "other"


_NEEDS_PERSON = (StartPositionError, SchemaHistoryError, BinlogError, ReplicationTLSError, BinlogNotEnabledError,
                 BinlogFormatError, BinlogPositionError, PacketTooLargeError)


def _code(error: BaseException) -> int | None:
    code = getattr(error, "code", None)
    if isinstance(code, int):
        return code
    args = getattr(error, "args", ())
    return args[0] if isinstance(error, pymysql.err.MySQLError) and args and isinstance(args[0], int) else None


def classify(error: BaseException) -> ErrorKind:
    """The kind of a parser error, from its type and server error code alone."""
    if isinstance(error, SourceMismatchError):
        return ErrorKind.SOURCE_MISMATCH
    if isinstance(error, ReplicationAuthError | MissingPrivilegeError):
        return ErrorKind.ACCESS
    if isinstance(error, ServerUnreachableError | ConnectionLostError):
        return ErrorKind.UNREACHABLE
    if isinstance(error, _NEEDS_PERSON):
        return ErrorKind.NEEDS_PERSON
    if isinstance(error, ReplicationError | pymysql.err.MySQLError):
        code = _code(error)
        if code in ACCESS_CODES:
            return ErrorKind.ACCESS
        if code in UNREACHABLE_CODES:
            return ErrorKind.UNREACHABLE
        return ErrorKind.OTHER
    if isinstance(error, OSError):  # refused, reset, timed out, DNS: below any server answer
        return ErrorKind.UNREACHABLE
    return ErrorKind.OTHER


@dataclass(frozen=True, slots=True)
class ParserError:
    """An error as the health snapshot keeps it. Times are wall-clock seconds (``time.time()``)."""

    error: BaseException
    kind: ErrorKind
    since: float  # the first failure of this kind in the current run of failures
    failures: int  # failures in a row, of any kind
    cleared_at: float | None = None  # when a dump read its first event after it

    @property
    def type_name(self) -> str:
        return type(self.error).__name__

    @property
    def message(self) -> str:
        return str(self.error)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; times in ms since the epoch."""
        return {"kind": self.kind.value, "type": self.type_name, "message": self.message,
                "since": int(self.since * 1000), "failures": self.failures,
                "cleared_at": None if self.cleared_at is None else int(self.cleared_at * 1000)}


@dataclass(frozen=True, slots=True)
class ParserHealth:
    """One parser's state at one moment.

    ``error``: what holds the parser up now (retrying, or the error that stopped it); None while connecting
    or streaming. ``last_error``: the most recent error, also after it cleared (then ``cleared_at`` is set).
    """

    state: ParserState
    since: float  # when this state began (wall clock)
    source: str  # host:port the parser reads or tries
    error: ParserError | None = None
    last_error: ParserError | None = None

    @property
    def streaming(self) -> bool:
        return self.state is ParserState.STREAMING

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (status files, sensors); times in ms since the epoch."""
        return {"state": self.state.value, "since": int(self.since * 1000), "source": self.source,
                "error": None if self.error is None else self.error.to_dict(),
                "last_error": None if self.last_error is None else self.last_error.to_dict()}

    def describe(self) -> str:
        """One line for a status display: state, source, and the error holding it up, if any."""
        text = f"{self.state.value} {self.source} since {_clock_text(self.since)}"
        e = self.error
        if e is not None:
            text += (f": {e.kind.value} ({e.failures} failure{'s' if e.failures != 1 else ''} since "
                     f"{_clock_text(e.since)}) {e.type_name}: {e.message}")
        return text


def _clock_text(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + " UTC"


class HealthTracker:
    """The current ``ParserHealth`` of one parser; thread-safe, each change a new snapshot."""

    def __init__(self, source: str, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot = ParserHealth(ParserState.STOPPED, clock(), source)

    @property
    def snapshot(self) -> ParserHealth:
        return self._snapshot

    def connecting(self, source: str) -> None:
        """Started, or switched to ``source``: connecting, unless an error still holds it up (then retrying)."""
        with self._lock:
            s = self._snapshot
            state = ParserState.RETRYING if s.error is not None else ParserState.CONNECTING
            since = s.since if state is s.state else self._clock()
            self._snapshot = replace(s, state=state, since=since, source=source)

    def streaming(self) -> None:
        """A dump read its first event: the error, if any, is cleared."""
        s = self._snapshot
        if s.state is ParserState.STREAMING:
            return
        with self._lock:
            s = self._snapshot
            now = self._clock()
            last = replace(s.error, cleared_at=now) if s.error is not None else s.last_error
            self._snapshot = replace(s, state=ParserState.STREAMING, since=now, error=None, last_error=last)

    def failed(self, error: BaseException, *, retrying: bool) -> ParserError:
        """A failure: retrying after a back-off, or (``retrying=False``) the parser stops on it."""
        with self._lock:
            s = self._snapshot
            now = self._clock()
            kind = classify(error)
            prev = s.error
            failures = prev.failures + 1 if prev is not None else 1
            since = prev.since if prev is not None and prev.kind is kind else now
            err = ParserError(error, kind, since, failures)
            state = ParserState.RETRYING if retrying else ParserState.STOPPED
            started = s.since if state is s.state else now
            self._snapshot = replace(s, state=state, since=started, error=err, last_error=err)
            return err

    def stopped(self) -> None:
        """Ended by ``stop()`` (an error that stopped it is recorded by ``failed(retrying=False)``)."""
        with self._lock:
            s = self._snapshot
            if s.state is ParserState.STOPPED:
                return
            self._snapshot = replace(s, state=ParserState.STOPPED, since=self._clock(), error=None)
