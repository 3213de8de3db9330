"""The snapshot registry: which mirrors have their initial snapshot, and whether the stream caught up from it.

``{state}/snapshots.json`` = {table: {"position_key", "position", "rows", "run_id", "caught_up"}}. A file, not
the sensor's cursor: snapshot runs write it (also ones launched by hand, or a mirror materialized from the UI)
and it outlives cursor resets. Updates hold a lock: the sensor and runs both write it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .config import PipelineConfig


class SnapshotRegistry:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, dict[str, Any]]:
        try:
            data: dict[str, dict[str, Any]] = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        return data

    @contextlib.contextmanager
    def _update(self) -> Iterator[dict[str, dict[str, Any]]]:
        from canal_core.parse.position import write_atomically

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self.load()
            before = json.dumps(data, sort_keys=True)
            yield data
            if json.dumps(data, sort_keys=True) != before:
                write_atomically(self.path, json.dumps(data, sort_keys=True, indent=1).encode())

    def pending(self, tables: Iterable[str]) -> list[str]:
        have = self.load()
        return [t for t in tables if t not in have]

    def catch_up(self) -> dict[str, str]:
        """Tables snapshotted but not yet caught up -> their snapshot position "file:offset"."""
        return {t: v["position"] for t, v in self.load().items() if not v.get("caught_up")}

    def record_snapshot(self, table: str, position: str, position_key: int, rows: int = 0, run_id: str = "") -> None:
        with self._update() as data:
            data[table] = {"position_key": position_key, "position": position, "rows": rows, "run_id": run_id,
                           "caught_up": False}

    def mark_caught_up(self, positions: Mapping[str, str]) -> None:
        """Tables caught up from the snapshot at that position (a newer snapshot since then stays pending)."""
        with self._update() as data:
            for t, pos in positions.items():
                if t in data and data[t].get("position") == pos:
                    data[t]["caught_up"] = True


def registry_for(config: PipelineConfig) -> SnapshotRegistry:
    return SnapshotRegistry(config.state_dir / "snapshots.json")


def snapshot_data_dir(config: PipelineConfig, run_id: str) -> Path:
    """Where a snapshot run puts the Parquet it reads from MySQL before writing the mirror."""
    return config.staging_root / config.destination / "snapshot-data" / run_id


def window_dir(config: PipelineConfig, window: int, attempt: int) -> Path:
    """Where the sensor stages window ``window``'s attempt ``attempt``."""
    from .window import window_dir_name

    return config.staging_root / config.destination / window_dir_name(window, attempt)
