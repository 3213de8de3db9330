"""Parse-position managers: where the parser of a destination restarts (Canal's CanalLogPositionManager).

A position manager remembers, per destination, the last transaction-boundary ``LogPosition`` the parser
handed to the store. Implementations:

- ``MemoryPositionManager``: a dict (lost on restart).
- ``FilePositionManager``: ``{data_dir}/{destination}/parse.dat`` (Canal's file name), Canal's JSON without
  ``"@type"``, replaced atomically (temp file + fsync + rename); optionally buffered in memory and flushed
  every ``flush_period`` seconds like Canal's FileMixedLogPositionManager.
- ``FailbackPositionManager(primary, secondary)``: read the primary, fall back to the secondary when the
  primary has nothing or fails; persist to the primary, to the secondary when the primary fails.
- ``MetaPositionManager(min_cursor)``: the minimum client cursor of the destination (Canal's
  MetaLogPositionManager); persisting is a no-op, the clients' acks move it.

The ZooKeeper implementation (``/otter/canal/destinations/{dest}/parse``, Canal's ZooKeeperLogPositionManager)
is ``canal_core.meta.zkposition.ZooKeeperPositionManager``; ``encode_position`` / ``decode_position`` give the
payload bytes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from ..protocol.errors import CanalError
from ..protocol.position import LogPosition

log = logging.getLogger(__name__)

PARSE_FILE_NAME = "parse.dat"


class PositionStoreError(CanalError):
    """A position could not be read or written; the message names the destination and the place."""


def encode_position(position: LogPosition) -> bytes:
    """Canal's parse-position payload (file and ZooKeeper ``.../parse``): JSON without ``"@type"``."""
    return position.to_json(with_type=False).encode("utf-8")


def decode_position(data: bytes | str, *, where: str = "") -> LogPosition:
    """Parse Canal's LogPosition JSON (with or without ``"@type"``)."""
    try:
        pos = LogPosition.from_json(data)
    except (ValueError, TypeError, AttributeError) as e:
        raise PositionStoreError(f"cannot parse the stored position{' in ' + where if where else ''}: {e}; "
                                 f"fix or delete it to start from the configured position") from e
    if not pos.position.journal_name and not pos.position.gtid and not pos.position.timestamp:
        raise PositionStoreError(f"the stored position{' in ' + where if where else ''} names no journal, "
                                 f"gtid or timestamp; fix or delete it to start from the configured position")
    return pos


class PositionManager:
    """Interface of every parse-position manager (Canal's CanalLogPositionManager)."""

    def start(self) -> None:
        """Acquire resources (threads, sessions). Managers work without it where they can."""

    def stop(self) -> None:
        """Flush and release resources."""

    def get_latest(self, destination: str) -> LogPosition | None:
        raise NotImplementedError

    def persist(self, destination: str, position: LogPosition) -> None:
        raise NotImplementedError

    def remove_cache(self, destination: str) -> None:
        """Forget what is cached in memory for ``destination`` (not what is stored durably)."""

    def __enter__(self) -> PositionManager:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class MemoryPositionManager(PositionManager):
    def __init__(self) -> None:
        self._positions: dict[str, LogPosition] = {}
        self._lock = threading.Lock()

    def get_latest(self, destination: str) -> LogPosition | None:
        with self._lock:
            return self._positions.get(destination)

    def persist(self, destination: str, position: LogPosition) -> None:
        with self._lock:
            self._positions[destination] = position

    def remove_cache(self, destination: str) -> None:
        with self._lock:
            self._positions.pop(destination, None)

    def destinations(self) -> list[str]:
        with self._lock:
            return list(self._positions)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new content."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # make the rename itself durable
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


class FilePositionManager(PositionManager):
    """One JSON file per destination: ``{data_dir}/{destination}/parse.dat``.

    ``flush_period`` = 0 (default): every ``persist`` writes the file before returning.
    ``flush_period`` > 0: ``persist`` updates memory and a background thread writes changed destinations
    every ``flush_period`` seconds (Canal's canal.file.flush.period); ``flush()`` / ``stop()`` write at once.
    """

    def __init__(self, data_dir: str | os.PathLike[str], *, flush_period: float = 0.0) -> None:
        self.data_dir = Path(data_dir)
        self.flush_period = flush_period
        self._memory = MemoryPositionManager()
        self._dirty: set[str] = set()
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def path(self, destination: str) -> Path:
        if not destination or destination in (".", "..") or "/" in destination or "\\" in destination:
            raise PositionStoreError(f"invalid destination name {destination!r} for a position file")
        return self.data_dir / destination / PARSE_FILE_NAME

    # ---- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise PositionStoreError(f"cannot create the position directory {self.data_dir}: {e}") from e
        if not os.access(self.data_dir, os.R_OK | os.W_OK):
            raise PositionStoreError(f"position directory {self.data_dir} is not readable and writable")
        if self.flush_period > 0 and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._flush_loop, name="parse-position-flush", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.flush()

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.flush_period):
            try:
                self.flush()
            except PositionStoreError as e:
                log.error("%s", e)

    # ---- API -----------------------------------------------------------------------------------
    def get_latest(self, destination: str) -> LogPosition | None:
        cached = self._memory.get_latest(destination)
        if cached is not None:
            return cached
        path = self.path(destination)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise PositionStoreError(f"cannot read the position of {destination} from {path}: {e}") from e
        if not data.strip():
            return None
        return decode_position(data, where=str(path))

    def persist(self, destination: str, position: LogPosition) -> None:
        path = self.path(destination)
        if self.flush_period > 0:
            with self._lock:
                self._memory.persist(destination, position)
                self._dirty.add(destination)
            return
        self._write(destination, path, position)
        self._memory.persist(destination, position)

    def flush(self) -> None:
        """Write every destination changed since the last flush."""
        with self._lock:
            todo = [(d, self._memory.get_latest(d)) for d in sorted(self._dirty)]
            self._dirty.clear()
        for i, (destination, position) in enumerate(todo):
            if position is None:
                continue
            try:
                self._write(destination, self.path(destination), position)
            except PositionStoreError:
                with self._lock:  # keep what is not written for the next flush
                    self._dirty.update(d for d, _ in todo[i:])
                raise

    def remove_cache(self, destination: str) -> None:
        with self._lock:
            if destination in self._dirty:
                return  # not yet on disk: dropping it would lose it
            self._memory.remove_cache(destination)

    def _write(self, destination: str, path: Path, position: LogPosition) -> None:
        try:
            with self._io_lock:
                write_atomically(path, encode_position(position))
        except OSError as e:
            raise PositionStoreError(f"cannot write the position of {destination} to {path}: {e}") from e


class FailbackPositionManager(PositionManager):
    """Canal's FailbackLogPositionManager: primary first, secondary when the primary has nothing or fails.

    Canal's file and ZooKeeper instances use ``FailbackPositionManager(MemoryPositionManager(),
    MetaPositionManager(...))``: after a restart memory is empty and the clients' minimum cursor is used.
    """

    def __init__(self, primary: PositionManager, secondary: PositionManager) -> None:
        if primary is None or secondary is None:
            raise ValueError("FailbackPositionManager needs a primary and a secondary manager")
        self.primary = primary
        self.secondary = secondary

    def start(self) -> None:
        self.primary.start()
        self.secondary.start()

    def stop(self) -> None:
        try:
            self.secondary.stop()
        finally:
            self.primary.stop()

    def get_latest(self, destination: str) -> LogPosition | None:
        try:
            pos = self.primary.get_latest(destination)
        except Exception as e:
            log.warning("%s: reading the parse position from %s failed (%s); trying %s", destination,
                        type(self.primary).__name__, e, type(self.secondary).__name__)
            pos = None
        if pos is not None:
            return pos
        return self.secondary.get_latest(destination)

    def persist(self, destination: str, position: LogPosition) -> None:
        try:
            self.primary.persist(destination, position)
        except Exception as e:
            log.warning("%s: persisting the parse position to %s failed (%s); using %s", destination,
                        type(self.primary).__name__, e, type(self.secondary).__name__)
            self.secondary.persist(destination, position)

    def remove_cache(self, destination: str) -> None:
        self.primary.remove_cache(destination)
        self.secondary.remove_cache(destination)


class MetaPositionManager(PositionManager):
    """The minimum client cursor of the destination (Canal's MetaLogPositionManager).

    ``min_cursor(destination)`` returns the smallest acked cursor over the destination's subscribed
    clients, or None when there is none; the meta manager provides it. ``persist`` does nothing: the
    clients' acks move the cursors.
    """

    def __init__(self, min_cursor: Callable[[str], LogPosition | None]) -> None:
        self._min_cursor = min_cursor

    def get_latest(self, destination: str) -> LogPosition | None:
        return self._min_cursor(destination)

    def persist(self, destination: str, position: LogPosition) -> None:
        log.debug("%s: parse position %s (kept by the client cursors)", destination, position)

