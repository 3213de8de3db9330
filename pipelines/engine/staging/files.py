"""A staged window's directory: its place under the staging root, its manifest, and the durable writes that make
the directory appear complete or not at all (fsync of every file and directory, then one rename)."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..window import WindowManifest, window_dir_name
from .errors import IncompleteWindowError

MANIFEST = "manifest.json"
CHANGELOG = "changelog.parquet"


def window_path(root: Path | str, destination: str, window: int, attempt: int) -> Path:
    """``{root}/{destination}/w{window:012d}-a{attempt}``."""
    return Path(root) / destination / window_dir_name(window, attempt)


def load_window(path: Path | str) -> WindowManifest:
    """The manifest of a staged window directory; IncompleteWindowError when it has none."""
    p = Path(path)
    try:
        text = (p / MANIFEST).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise IncompleteWindowError(f"{p}: no {MANIFEST}, the window was not staged completely") from None
    return WindowManifest.from_json(text)


def _fsync_path(path: Path, flags: int = os.O_RDONLY) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    _fsync_path(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


def _write_parquet(table: pa.Table, path: Path, **options: Any) -> None:
    pq.write_table(table, path, compression="snappy", **options)
    _fsync_path(path)


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _replace_dir(tmp: Path, final: Path) -> None:
    """Move the finished temporary directory to ``final``, replacing an earlier (complete or not) staging."""
    old = None
    if final.exists():
        old = final.parent / f".{final.name}.old-{uuid.uuid4().hex[:12]}"
        os.rename(final, old)
    os.rename(tmp, final)
    _fsync_dir(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
