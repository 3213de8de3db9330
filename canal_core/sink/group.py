"""n:1 group sink (Canal's GroupEventSink with TimelineTransactionBarrier): several parsers, one per source,
feed one logical store, merged by executeTime without interleaving transactions.

Each source gets its own ``EntrySink`` (``group.source(name)``: transaction buffer, empty-transaction and
heartbeat rules), whose stored batches pass a timeline barrier before the shared ``put``:

- every source offers the executeTime of each batch it wants to store (its first entry's; for a
  transaction, its BEGIN's), and a heartbeat offers its own time (a heartbeat without one, such as the
  server's HEARTBEAT_LOG_EVENT whose header time is 0, offers the sink's clock: the server only sends it
  when it has nothing more, so whatever it sends next is newer). A dropped empty transaction offers its
  time too;
- a source's offer is a watermark: its next batch is assumed no older. A waiting batch is released when
  every source has offered at least once, no other waiting batch is older (ties go to the source listed
  first) and no idle source's watermark is older. So nothing is released before every source has spoken,
  and a source that stays silent stalls the merge of anything newer than its last offer (Canal's
  documented weakness, kept); its heartbeats lift the stall, so an idle but alive source does not block
  the group for longer than its heartbeat period;
- transactions are never interleaved: the batch holding a BEGIN takes the group's permit, and the
  source keeps it, passing every further batch at once, until its END has been stored; the other
  sources wait. A transaction split by the buffer is therefore stored whole before another source's
  starts. Without BEGIN/END entries (filter.transaction.entry) each batch holds the permit only while it
  is stored (Canal's plain TimelineBarrier).

Better than Canal: a resume position per source. ``positions()`` gives, for each source, the position after
the last transaction of that source whose every entry has been stored (or that was dropped as empty): what
that source's parser must resume from. Canal keeps one position for the whole group and cannot resume the
sources where each left off. Feed persisted positions back with ``GroupSink(..., positions=...)``.

Also unlike Canal: each source keeps its own empty-transaction counters (Canal shares one sink's across
sources whose clocks differ), and heartbeats and dropped empty transactions raise a source's watermark without
waiting at the barrier (in Canal they queue like data, and with filter.transaction.entry heartbeats are lost).

``release(name)`` is Canal's interrupt for one source (its parser stops or switches to a standby): the source
gives up the permit, and until it offers again the merge of newer data waits for it. ``close()`` wakes every
waiting parser with ``SinkClosedError``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..entry.model import CanalEntry
from ..protocol.errors import CanalError
from ..protocol.position import EntryPosition, LogIdentity, LogPosition
from .entry import EntrySink, Put


class SinkClosedError(CanalError):
    """The group sink was closed while a parser was waiting to store."""


def _wall_ms() -> int:
    return int(time.time() * 1000)


class SourceSink(EntrySink):
    """One source's sink inside a group: the parser of that source calls it like any sink."""

    def __init__(self, group: GroupSink, name: str, **options: Any) -> None:
        super().__init__(group._put, **options)
        self.group = group
        self.name = name

    def heartbeat(self, ts_ms: int | None = None) -> None:
        """Offer a watermark without an entry (an idle timer of the instance may call this)."""
        self.group._watermark(self.name, ts_ms if ts_ms else self.group._clock())

    def _deliver(self, entries: list[CanalEntry], heartbeat: CanalEntry | None, open_after: bool) -> None:
        if entries:
            self.group._release(self.name, entries, open_after and not self.filter_transaction_entry)
            self.stored_entries += len(entries)
        if heartbeat is not None:
            self.heartbeat(heartbeat.execute_time)

    def _skipped(self, entries: list[CanalEntry]) -> None:
        self.group._watermark(self.name, entries[0].execute_time)


class GroupSink:
    """``GroupSink(put, sources, positions=None, clock=None, **entry_sink_options)``.

    ``sources``: the source names in tie-break order, or a mapping name -> LogIdentity (used in
    ``positions()``; a bare name becomes ``LogIdentity(address=name)``). ``positions``: persisted resume
    positions per source (LogPosition or EntryPosition) to start ``positions()`` from. The remaining
    options go to every source's ``EntrySink`` (transaction_size, filter_transaction_entry, ...).
    """

    def __init__(self, put: Put, sources: Iterable[str] | Mapping[str, LogIdentity | None], *,
                 positions: Mapping[str, LogPosition | EntryPosition | None] | None = None,
                 clock: Callable[[], int] | None = None,
                 put_source: Callable[[str, list[CanalEntry]], None] | None = None, **options: Any) -> None:
        """``put_source(name, entries)``, when given, is called instead of ``put`` with the source's name."""
        if isinstance(sources, Mapping):
            idents = {n: (i or LogIdentity(address=n)) for n, i in sources.items()}
        else:
            idents = {n: LogIdentity(address=n) for n in sources}
        if not idents:
            raise ValueError("a group needs at least one source")
        self._put = put
        self._put_source = put_source
        self._clock = clock or _wall_ms
        self.identities = idents
        self._index = {n: i for i, n in enumerate(idents)}
        self._cond = threading.Condition()
        self._wm: dict[str, int | None] = dict.fromkeys(idents)  # last offered executeTime per source
        self._pending: dict[str, int | None] = dict.fromkeys(idents)  # the executeTime a source waits with
        self._owner: str | None = None  # who holds the permit (storing, or inside a transaction)
        self._closed = False
        self._interrupted: set[str] = set()
        self.waits = 0  # batches that had to wait for the barrier
        self._sinks: dict[str, SourceSink] = {}
        for n in idents:
            start = (positions or {}).get(n)
            if isinstance(start, LogPosition):
                start = start.position
            self._sinks[n] = SourceSink(self, n, position=start, **options)

    # ---- API ---------------------------------------------------------------------------------------------

    def source(self, name: str) -> SourceSink:
        """The sink to give that source's parser."""
        return self._sinks[name]

    __getitem__ = source

    def positions(self) -> dict[str, LogPosition]:
        """For each source that has one: where its parser resumes (after its last stored transaction)."""
        out = {}
        for n, s in self._sinks.items():
            pos = s.position
            if pos is not None:
                out[n] = LogPosition(identity=self.identities[n], position=pos)
        return out

    def watermarks(self) -> dict[str, int | None]:
        with self._cond:
            return dict(self._wm)

    def waiting(self) -> dict[str, int]:
        """Sources with a batch held by the barrier, and its executeTime."""
        with self._cond:
            return {n: ts for n, ts in self._pending.items() if ts is not None}

    @property
    def owner(self) -> str | None:
        return self._owner

    def release(self, name: str) -> None:
        """The source's parser stops or switches (Canal's interrupt): a batch of it waiting at the barrier
        fails with ``SinkClosedError``, it gives up the permit if it holds it, its watermark is forgotten
        (the merge of newer data waits until it offers again) and its buffered entries are dropped."""
        with self._cond:
            if self._owner == name:
                self._owner = None
            if self._pending[name] is not None:
                self._interrupted.add(name)
            self._wm[name] = None
            self._pending[name] = None
            self._cond.notify_all()
        self._sinks[name].reset()  # (waits for an interrupted call of that source to unwind)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # ---- barrier -----------------------------------------------------------------------------------------

    def _watermark(self, name: str, ts: int) -> None:
        with self._cond:
            wm = self._wm[name]
            if wm is None or ts > wm:
                self._wm[name] = ts
                self._cond.notify_all()

    def _permitted(self, name: str, ts: int) -> bool:
        owner = self._owner
        if owner is not None:
            return owner == name
        idx = self._index[name]
        for other, wm in self._wm.items():
            if other == name:
                continue
            if wm is None:
                return False
            waiting = self._pending[other]
            if waiting is not None:
                if (waiting, self._index[other]) < (ts, idx):
                    return False
            elif wm < ts:
                return False
        return True

    def _release(self, name: str, entries: list[CanalEntry], keep_permit: bool) -> None:
        """Wait for the barrier, store ``entries``; ``keep_permit``: the source is inside a transaction after
        them and keeps the permit until the batch that ends it."""
        ts = entries[0].execute_time
        cond = self._cond
        with cond:
            if self._closed:
                raise SinkClosedError("group sink closed")
            self._wm[name] = ts
            self._pending[name] = ts
            cond.notify_all()
            waited = False
            while True:
                if self._closed or name in self._interrupted:
                    self._interrupted.discard(name)
                    self._pending[name] = None
                    raise SinkClosedError("group sink closed" if self._closed else f"source {name} released")
                if self._permitted(name, ts):
                    break
                if not waited:
                    waited = True
                    self.waits += 1
                cond.wait()
            self._pending[name] = None
            self._owner = name
        stored = False
        try:
            # outside the lock: the permit alone keeps the other sources out
            if self._put_source is not None:
                self._put_source(name, entries)
            else:
                self._put(entries)
            stored = True
        finally:
            with cond:
                if self._owner == name and not (stored and keep_permit):
                    self._owner = None
                cond.notify_all()
