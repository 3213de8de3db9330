"""Which tables load in chunks (pipelines.engine.chunked_snapshot.chunk_key): one integer primary-key column only."""

from __future__ import annotations

from pipelines.engine.chunked_snapshot import chunk_key
from pipelines.engine.window import ColumnSpec as C


def test_chunk_key() -> None:
    assert chunk_key([C("id", "bigint(20) unsigned", True), C("v", "varchar(10)")]) == C("id", "bigint(20) unsigned",
                                                                                         True)
    assert chunk_key([C("v", "varchar(10)"), C("n", "int(11)", True)]) == C("n", "int(11)", True)
    for t in ("tinyint(4)", "smallint(6)", "mediumint(9)", "int", "bigint(20)"):
        assert chunk_key([C("id", t, True)]) is not None, t
    # a string, decimal or date key orders differently in MariaDB (collations) and in the mirror: not chunked
    for t in ("varchar(32)", "decimal(10,0)", "date", "binary(16)", "interval"):
        assert chunk_key([C("id", t, True)]) is None, t
    assert chunk_key([C("a", "int(11)", True), C("b", "int(11)", True)]) is None   # a composite key
    assert chunk_key([C("a", "int(11)"), C("b", "int(11)")]) is None                # no key
