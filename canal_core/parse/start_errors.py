"""Errors of the start-position search: each names positions / times, the server, and what to do.

``canal_core.parse.locator`` raises them (and re-exports them); ``StartPositionError`` is their base.
"""

from __future__ import annotations

import datetime as _dt

from ..protocol.errors import CanalError


class StartPositionError(CanalError):
    """Base of start-position errors: the message names positions / times and what to do."""

    def __init__(self, message: str) -> None:
        message = " ".join(message.split())
        super().__init__(message)
        self.message = message


class InvalidStartConfigError(StartPositionError):
    """The configured or stored position cannot be used as written (bad GTID text, no time to fall back on)."""


class BinlogFileNotFoundError(StartPositionError):
    """The binlog file of a position is not on the server (purged, or never existed)."""

    def __init__(self, file: str, position: int, server: str, available: list[str], *, purged: bool) -> None:
        self.file = file
        self.position = position
        self.available = available
        self.purged = purged
        oldest, newest = (available[0], available[-1]) if available else ("-", "-")
        if purged:
            what = (f"{file} was purged from {server}; the oldest binlog there is {oldest} (newest {newest}). "
                    f"Changes between {file}:{position} and {oldest}:4 are lost to replication: restart from "
                    f"{oldest}:4 or by timestamp, and re-sync those tables")
        else:
            what = (f"{server} has no binlog {file} (it has {oldest} .. {newest}): fix "
                    f"canal.instance.master.journal.name or the stored position")
        super().__init__(f"cannot start at {file}:{position}: {what}")


class PositionBeyondEndError(StartPositionError):
    """The position lies past the end of its binlog file."""

    def __init__(self, file: str, position: int, size: int, server: str, end: tuple[str, int]) -> None:
        self.file = file
        self.position = position
        self.size = size
        super().__init__(
            f"cannot start at {file}:{position}: {file} on {server} is only {size} bytes long (the binlog ends "
            f"at {end[0]}:{end[1]}); the position belongs to another server or a reset binlog: fix the "
            f"configured position, or start by timestamp")


class TimestampTooOldError(StartPositionError):
    """The requested time is older than the oldest binlog still on the server."""

    def __init__(self, requested_ms: int, oldest_file: str, oldest_ms: int, server: str) -> None:
        self.requested_ms = requested_ms
        self.oldest_file = oldest_file
        self.oldest_ms = oldest_ms
        super().__init__(
            f"no binlog on {server} reaches back to {format_ms(requested_ms)}: the oldest binlog still there is "
            f"{oldest_file}, starting at {format_ms(oldest_ms)}; changes before that were purged. Start at or "
            f"after {format_ms(oldest_ms)} (or from {oldest_file}:4) and re-sync what happened before")


class GtidNotAvailableError(StartPositionError):
    """The server cannot stream from the requested GTID position."""

    def __init__(self, gtid: str, server: str, server_message: str, executed: str, oldest_file: str | None) -> None:
        self.gtid = gtid
        self.server_message = server_message
        self.executed = executed
        super().__init__(
            f"{server} cannot stream from GTID {gtid}: {server_message}; the server has executed {executed or '-'}"
            + (f" and its oldest binlog is {oldest_file}" if oldest_file else "")
            + ". If the GTID belongs to another server or its transactions were purged, set "
              "canal.instance.master.gtid to a position the server has, or switch gtidon off and start by "
              "timestamp")


class FallbackImpossibleError(StartPositionError):
    """A source switch needs a timestamp search but the stored position carries no time."""


def format_ms(ms: int) -> str:
    t = _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC)
    return f"{t:%Y-%m-%d %H:%M:%S}.{ms % 1000:03d} UTC ({ms} ms)"
