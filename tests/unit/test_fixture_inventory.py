"""Every binlog file in the shared fixtures, found by walking the tree rather than from a list: each real
binlog decodes whole with a default decoder, and each negative sample the fixtures README names gives a typed
BinlogError. The walk must find exactly the files MANIFEST.md describes, so a file added later is not missed."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from fixture_support import fixtures_available, fixtures_root, manifest_rows, require_fixtures

from canal_core.binlog import BinlogDecoder, BinlogError, read_file
from canal_core.binlog.constants import BINLOG_MAGIC

# whole files the fixtures README lists as negative samples (no binlog magic)
NEGATIVE = (
    "canal/parse/src/test/resources/binlog/tsdb/mysql-bin.000001",
    "apecloud-mysql-binlog-connector-rust/tests/parse_file_tests/non-binlog",
)


def _head(path: Path) -> bytes:
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as fh:
            return fh.read(4)
    with open(path, "rb") as fh:
        return fh.read(4)


def _binlogs_on_disk() -> list[str]:
    """Files whose first bytes are the binlog magic (event vectors under vectors/ are single events)."""
    if not fixtures_available():
        return []
    root = fixtures_root()
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and "vectors" not in p.relative_to(root).parts and _head(p) == BINLOG_MAGIC)


_FOUND = _binlogs_on_disk()


def test_the_walk_finds_every_binlog_the_manifest_lists() -> None:
    require_fixtures()
    rows = manifest_rows()
    assert _FOUND == sorted(r.file for r in rows if not r.corrupt)
    # the rest of MANIFEST.md's rows are negatives the README names
    assert {r.file for r in rows if r.corrupt} <= set(NEGATIVE)


@pytest.mark.parametrize("rel", _FOUND or ["FIXTURES-MISSING"])
def test_binlog_file_decodes_whole(rel: str) -> None:
    path = require_fixtures() / rel
    dec = BinlogDecoder()
    events = list(read_file(path, dec))
    size = len(gzip.decompress(path.read_bytes())) if path.suffix == ".gz" else path.stat().st_size
    last = events[-1]
    assert last.position is not None and last.position + last.length == size, "stopped before the end"
    assert dec.skipped_unknown == 0


@pytest.mark.parametrize("rel", NEGATIVE)
def test_negative_sample_is_a_typed_error(rel: str) -> None:
    path = require_fixtures() / rel
    with pytest.raises(BinlogError) as ei:
        list(read_file(path, BinlogDecoder()))
    assert ei.value.file == path.name and ei.value.position == 0
