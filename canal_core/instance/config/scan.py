"""canal.auto.scan: the destinations a conf directory holds, and what changed between two scans."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from .keys import DEST_RE
from .properties import INSTANCE_PROPERTIES

_SCAN_SKIP = frozenset({"spring", "metrics"})  # directories of Canal's conf/ that are not destinations


class ScannedDestination(NamedTuple):
    path: Path  # the destination's instance.properties
    mtime_ns: int
    sha256: str


@dataclass(frozen=True)
class ScanDiff:
    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)


def scan_destinations(conf_dir: str | os.PathLike[str]) -> dict[str, ScannedDestination]:
    """Every ``{conf_dir}/{name}/instance.properties`` (Canal's auto scan: a directory holding an
    instance.properties is a destination; ``spring/``, ``metrics/`` and hidden directories are not)."""
    out: dict[str, ScannedDestination] = {}
    try:
        entries = sorted(os.scandir(conf_dir), key=lambda e: e.name)
    except FileNotFoundError:
        return out
    for entry in entries:
        name = entry.name
        if name.startswith(".") or name in _SCAN_SKIP or not DEST_RE.fullmatch(name):
            continue
        try:
            if not entry.is_dir():
                continue
            path = Path(entry.path) / INSTANCE_PROPERTIES
            st = path.stat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:  # not a destination, or removed while scanning
            continue
        out[name] = ScannedDestination(path, st.st_mtime_ns, digest)
    return out


def diff_destinations(old: Mapping[str, ScannedDestination], new: Mapping[str, ScannedDestination]) -> ScanDiff:
    """Destinations added, changed (instance.properties rewritten or touched: Canal reloads on a new
    modification time; the hash also catches edits within the file system's timestamp granularity) and
    removed between two scans."""
    added = tuple(sorted(n for n in new if n not in old))
    removed = tuple(sorted(n for n in old if n not in new))
    changed = tuple(sorted(n for n in new if n in old and (new[n].mtime_ns != old[n].mtime_ns
                                                           or new[n].sha256 != old[n].sha256
                                                           or new[n].path != old[n].path)))
    return ScanDiff(added, changed, removed)

