"""FileMixedMetaManager: memory, plus subscriptions and cursors flushed to
``{data_dir}/{destination}/meta.dat`` (Canal's file instance, spring/file-instance.xml).

- The file is Canal's JSON (no "@type"): a Java Canal can read ours and we read Java Canal's.
- Cursor updates are written at most every ``flush_period_ms`` (canal.file.flush.period, default 1000 ms;
  0 = synchronously, each one before the ack returns):
  many acks in one period cost one write. Subscribe/unsubscribe are written at once by the flusher thread
  (Canal submits them to its executor), not on the caller's thread.
- Writes replace the file atomically (temp file + fsync + rename + directory fsync): a crash leaves the
  previous or the new content, never a torn file (Canal overwrites in place).
- A destination's file is loaded the first time the destination is used (Canal's lazy computing maps);
  ``start()`` also loads every meta.dat already present so that a corrupt file fails the start, loudly.
- Outstanding batches are memory-only, as in Canal: after a crash the client resumes from its cursor and
  batches it had not acked are delivered again (at-least-once).
- ``stop()`` flushes, then forgets the in-memory state (a later start reloads the files).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from ..parse.position import write_atomically
from .errors import MetaStoreError
from .manager import FlushThread, MemoryMetaManager
from .model import decode_meta_file, encode_meta_file

log = logging.getLogger(__name__)

META_FILE_NAME = "meta.dat"


class FileMixedMetaManager(MemoryMetaManager):
    def __init__(self, data_dir: str | os.PathLike[str], *, flush_period_ms: float = 1000) -> None:
        super().__init__()
        if flush_period_ms < 0:
            raise ValueError(f"canal.file.flush.period must be >= 0, got {flush_period_ms}")
        self.data_dir = Path(data_dir)
        self.flush_period_ms = flush_period_ms
        self._loaded: set[str] = set()
        self._dirty: set[str] = set()
        self._io_lock = threading.Lock()  # one flush at a time: an older snapshot never overwrites a newer one
        self._flusher = FlushThread(self.flush, flush_period_ms, "meta-file-flush")

    def path(self, destination: str) -> Path:
        if not destination or destination in (".", "..") or "/" in destination or "\\" in destination:
            raise MetaStoreError(f"invalid destination name {destination!r} for a meta file")
        return self.data_dir / destination / META_FILE_NAME

    # ---- lifecycle ----
    def start(self) -> None:
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise MetaStoreError(f"dir[{self.data_dir}] can not be created: {e}") from e
        if not os.access(self.data_dir, os.R_OK | os.W_OK):
            raise MetaStoreError(f"dir[{self.data_dir}] can not read/write")
        with self._lock:
            for path in sorted(self.data_dir.glob(f"*/{META_FILE_NAME}")):
                self._touch(path.parent.name)
        super().start()
        self._flusher.start()

    def stop(self) -> None:
        self._flusher.stop()
        self.flush()  # on failure the state stays in memory, so stop() can be retried
        with self._lock:
            super().stop()
            self._loaded.clear()
            self._dirty.clear()

    # ---- persistence hooks ----
    def _touch(self, destination: str) -> None:
        if destination in self._loaded:
            return
        path = self.path(destination)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = b""
        except OSError as e:
            raise MetaStoreError(f"cannot read the meta of {destination} from {path}: {e}") from e
        try:
            clients = decode_meta_file(data, destination)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise MetaStoreError(f"cannot parse the meta of {destination} in {path}: {e}; fix or delete it "
                                 f"(clients then restart from the configured position)") from e
        self._loaded.add(destination)
        subs = self._subscriptions.setdefault(destination, [])
        for client, cursor in clients:
            if client not in subs:
                subs.append(client)
            if cursor is not None and client not in self._cursors:
                self._cursors[client] = cursor

    def _changed(self, destination: str, *, subscription: bool) -> None:
        self._dirty.add(destination)
        if self.flush_period_ms == 0:
            # period 0: every change is on disk before the call (an ack) returns, so a crash can only
            # redeliver batches that were not acked
            self.flush()
        elif subscription:
            self._flusher.wake()  # rare: write soon rather than at the next period

    # ---- flushing ----
    def flush(self) -> None:
        """Write every destination changed since the last flush (all of them on failure's retry)."""
        with self._io_lock:
            with self._lock:
                todo = sorted(self._dirty)
                self._dirty.clear()
                snapshots = [(d, encode_meta_file(d, [(c, self._cursors.get(c))
                                                      for c in self._subscriptions.get(d, ())]))
                             for d in todo]
            for i, (destination, data) in enumerate(snapshots):
                path = self.path(destination)
                try:
                    write_atomically(path, data)
                except OSError as e:
                    with self._lock:  # keep the unwritten ones for the next flush
                        self._dirty.update(todo[i:])
                    raise MetaStoreError(f"cannot write the meta of {destination} to {path}: {e}") from e
