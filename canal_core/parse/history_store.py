"""Where a schema history lives: the store protocol, an in-memory store and the file store.

Store layout (``FileHistoryStore``, one directory per destination)::

    history.jsonl                  one JSON object per line, appended and fsynced per DDL:
                                   {"seq", "position": EntryPosition JSON (Canal's field names),
                                    "schema": session default schema, "sql", "result": DdlResult fields,
                                    "recorded_at": ms}
    snapshots/snapshot-<seq>-<ms>.json
                                   {"seq", "position", "taken_at": ms, "model": SchemaModel.to_dict()}
                                   written to a temporary file, fsynced, then renamed
    meta.json                      {"format": 1, "source": {...}} (who to rebuild from)
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from .model import SchemaHistoryError
from .position import write_atomically

log = logging.getLogger(__name__)


class HistoryStore(Protocol):
    """Where a schema history lives. Records are dicts with an increasing ``seq``."""

    def append(self, record: dict[str, Any]) -> None: ...
    def records(self) -> Iterator[dict[str, Any]]: ...
    def write_snapshot(self, snapshot: dict[str, Any]) -> str: ...
    def snapshots(self) -> list[dict[str, Any]]: ...  # metadata: id, seq, position, taken_at
    def read_snapshot(self, snapshot_id: str) -> dict[str, Any]: ...
    def delete_snapshot(self, snapshot_id: str) -> None: ...
    def compact(self, up_to_seq: int) -> None: ...  # forget records with seq <= up_to_seq
    def read_meta(self) -> dict[str, Any]: ...
    def write_meta(self, meta: dict[str, Any]) -> None: ...


class MemoryHistoryStore:
    def __init__(self) -> None:
        self._records: list[dict[str, Any]] = []
        self._snaps: dict[str, dict[str, Any]] = {}
        self._meta: dict[str, Any] = {}

    def append(self, record: dict[str, Any]) -> None:
        self._records.append(json.loads(json.dumps(record)))

    def records(self) -> Iterator[dict[str, Any]]:
        return iter(list(self._records))

    def write_snapshot(self, snapshot: dict[str, Any]) -> str:
        sid = f"snapshot-{snapshot['seq']:010d}-{snapshot['taken_at']}-{len(self._snaps)}"
        self._snaps[sid] = json.loads(json.dumps(snapshot))
        return sid

    def snapshots(self) -> list[dict[str, Any]]:
        return [{"id": k, "seq": v["seq"], "position": v["position"], "taken_at": v["taken_at"]}
                for k, v in self._snaps.items()]

    def read_snapshot(self, snapshot_id: str) -> dict[str, Any]:
        return self._snaps[snapshot_id]

    def delete_snapshot(self, snapshot_id: str) -> None:
        self._snaps.pop(snapshot_id, None)

    def compact(self, up_to_seq: int) -> None:
        self._records = [r for r in self._records if r["seq"] > up_to_seq]

    def read_meta(self) -> dict[str, Any]:
        return dict(self._meta)

    def write_meta(self, meta: dict[str, Any]) -> None:
        self._meta = dict(meta)


class FileHistoryStore:
    """The history as files under one directory (see the module docstring)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "snapshots").mkdir(exist_ok=True)
        self.history_path = self.dir / "history.jsonl"
        self._snap_meta: dict[str, dict[str, Any]] | None = None
        self._repair_tail()

    def _repair_tail(self) -> None:
        """Cut a torn last line (a crash during append) so that the next append starts a new line."""
        if not self.history_path.exists():
            return
        with open(self.history_path, "rb+") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            back = min(size, 1 << 20)
            f.seek(size - back)
            tail = f.read(back)
            cut = tail.rfind(b"\n")
            keep = size - back + cut + 1 if cut >= 0 else 0
            log.warning("%s: cutting a torn last line (%d bytes)", self.history_path, size - keep)
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        with open(self.history_path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def records(self) -> Iterator[dict[str, Any]]:
        if not self.history_path.exists():
            return
        with open(self.history_path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    # a torn last line (crash during append) is ignored; anything else is corruption
                    rest = f.read()
                    if rest.strip():
                        raise SchemaHistoryError(f"{self.history_path}: line {n} is not JSON") from None
                    log.warning("%s: ignoring a torn last line %d", self.history_path, n)
                    return

    def _write_atomic(self, path: Path, data: Any) -> None:
        write_atomically(path, json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))

    def write_snapshot(self, snapshot: dict[str, Any]) -> str:
        sid = f"snapshot-{snapshot['seq']:010d}-{snapshot['taken_at']}"
        self._write_atomic(self.dir / "snapshots" / f"{sid}.json", snapshot)
        self._snap_meta = None
        return sid

    def snapshots(self) -> list[dict[str, Any]]:
        if self._snap_meta is None:
            meta = {}
            for p in sorted((self.dir / "snapshots").glob("snapshot-*.json")):
                with open(p, encoding="utf-8") as f:
                    d = json.load(f)
                meta[p.stem] = {"id": p.stem, "seq": d["seq"], "position": d["position"], "taken_at": d["taken_at"]}
            self._snap_meta = meta
        return list(self._snap_meta.values())

    def read_snapshot(self, snapshot_id: str) -> dict[str, Any]:
        with open(self.dir / "snapshots" / f"{snapshot_id}.json", encoding="utf-8") as f:
            return json.load(f)

    def delete_snapshot(self, snapshot_id: str) -> None:
        (self.dir / "snapshots" / f"{snapshot_id}.json").unlink(missing_ok=True)
        self._snap_meta = None

    def compact(self, up_to_seq: int) -> None:
        keep = [r for r in self.records() if r["seq"] > up_to_seq]
        lines = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in keep)
        write_atomically(self.history_path, lines.encode("utf-8"))

    def read_meta(self) -> dict[str, Any]:
        p = self.dir / "meta.json"
        if not p.exists():
            return {}
        with open(p, encoding="utf-8") as f:
            return json.load(f)

    def write_meta(self, meta: dict[str, Any]) -> None:
        self._write_atomic(self.dir / "meta.json", meta)

