"""pipelines.engine.lake on a Spark Connect session: a server started by scripts/spark-connect.sh (fails, never skips,
when it cannot start), the core lake behaviours through it, every expected table state written out by hand and read back
with plain SELECTs. Staged windows come from tests/support/staged_windows.py, the tests' writer of the staging
contract."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.engine import lake as L
from pipelines.engine.reconcile import arrow_fingerprint, dataframe_fingerprint
from pipelines.engine.types import arrow_type
from pipelines.engine.window import OP_DELETE, OP_INSERT, OP_UPDATE, ColumnSpec
from tests.support.net import free_port
from tests.support.spark import INTERPRETED, table_with_txns
from tests.support.staged_windows import (
    ITEMS,
    Part,
    Win,
    changelog_windows,
    k,
    p,
    remerge_beside_a_window,
    stage,
    table_of,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "scripts" / "spark-connect.sh")
I, U, D = OP_INSERT, OP_UPDATE, OP_DELETE  # noqa: E741
TXN_APP = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"


def _script(env: dict[str, str], *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """A Connect server of this module's own (state directory and port), so a developer's server is untouched."""
    env = {**os.environ, "CANAL_SPARK_CONNECT_DIR": str(tmp_path_factory.mktemp("spark-connect")),
           "CANAL_SPARK_CONNECT_PORT": str(free_port()),
           # the warm-up runs whole, on small writes: its code is tested; an interpreted server has no JIT to warm
           "CANAL_SPARK_CONNECT_WARMUP_ROWS": "2000"}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    r = _script(env, "start", *(a for k, v in INTERPRETED.items() for a in ("--conf", f"{k}={v}")))
    if r.returncode != 0:
        pytest.fail(f"scripts/spark-connect.sh start failed (exit {r.returncode}):\n{r.stderr[-4000:]}")
    if "warmed up in" not in r.stderr:
        pytest.fail(f"scripts/spark-connect.sh start did not warm the fresh server up:\n{r.stderr[-4000:]}")
    url = r.stdout.strip().splitlines()[-1]
    try:
        yield url, env
    finally:
        _script(env, "stop", timeout=120)


@pytest.fixture(scope="module")
def cspark(server: tuple[str, dict[str, str]]) -> Iterator[Any]:
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    # pyspark.sql.functions build Connect columns only in "Connect mode"; a classic session of another test module
    # may live in this process, so the switch is set for this module only (and the classic builder, which refuses
    # a remote session beside a SparkContext, is not used)
    saved = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    session = RemoteSession.builder.remote(server[0]).create()
    try:
        yield session
    finally:
        session.stop()
        if saved is None:
            os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
        else:
            os.environ["SPARK_CONNECT_MODE_ENABLED"] = saved


def rows(spark: Any, path: str, *cols: str) -> list[tuple[Any, ...]]:
    df = spark.sql(f"SELECT * FROM delta.`{path}`")
    names = list(cols) or [c for c in df.columns if not c.startswith("_canal_")]
    return sorted(tuple(r) for r in df.select(*names).collect())


def version(spark: Any, path: str) -> int:
    return int(spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()["version"])


# ---- the server and the run's resource --------------------------------------------------------------------------


def test_script_is_idempotent_and_a_run_session_leaves_the_server_running(server: tuple[str, dict[str, str]]) -> None:
    url, env = server
    again = _script(env, "start")
    assert again.returncode == 0 and again.stdout.strip() == url and "already running" in again.stderr
    assert _script(env, "status").returncode == 0
    assert _script(env, "url").stdout.strip() == url
    # the Dagster resource in a process of its own, as a run uses it: a Connect session, no JVM, released at teardown
    code = textwrap.dedent(f"""
        from pyspark import SparkContext
        from pipelines.engine.sparkenv import is_connect
        from pipelines.defs.resources import SparkResource
        res = SparkResource(remote={url!r}, conf={{"spark.sql.shuffle.partitions": "3"}})
        s = res.session()
        assert is_connect(s) and s.sql("SELECT 41 + 1").first()[0] == 42
        assert s.conf.get("spark.sql.shuffle.partitions") == "3"
        assert SparkContext._gateway is None and SparkContext._active_spark_context is None
        assert res.started_at > 0
        res.teardown_after_execution(None)
        print("ok")
    """)
    env2 = {k: v for k, v in env.items() if k != "SPARK_CONNECT_MODE_ENABLED"}
    r = subprocess.run([sys.executable, "-c", code], env=env2, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
    assert _script(env, "status").returncode == 0   # the run's teardown did not stop the server


# ---- the changelog ----------------------------------------------------------------------------------------------


def test_changelog_append_and_idempotent_replay(cspark: Any, tmp_path: Path) -> None:
    lake = L.Lake(str(tmp_path / "lake"))
    w1, w2, w2b = changelog_windows(tmp_path)
    cols = [("id", pa.int32(), True)]
    path = lake.changelog_path()
    assert L.apply_changelog(cspark, lake, *w1) == 3
    assert L.apply_changelog(cspark, lake, *w2) == 2
    v = version(cspark, path)
    assert L.apply_changelog(cspark, lake, *w2) == 0    # the same window again
    assert L.apply_changelog(cspark, lake, *w1) == 0    # an older window after a newer one
    assert version(cspark, path) == v                   # ... committed nothing
    assert L.apply_changelog(cspark, lake, *w2b) == 1   # overlapping re-delivery: insert-only MERGE
    expected = [(k(10), 0, I, dt.date(2024, 5, 1)), (k(10), 1, I, dt.date(2024, 5, 1)),
                (k(40), 0, I, dt.date(2024, 5, 1)), (k(50), 0, D, dt.date(2024, 5, 1)),
                (k(70), 0, I, dt.date(2024, 5, 2)), (k(90), 0, I, dt.date(2024, 5, 2))]
    assert rows(cspark, path, "pos", "row", "op", "event_date") == expected
    assert L.read_table_version(cspark, path, L.changelog_app_id("d1")) == k(90)
    assert L.read_table_version(cspark, path, L.changelog_app_id("other")) is None
    assert L.read_table_version(cspark, str(tmp_path / "nothing"), "x") is None
    assert not L.is_delta_table(cspark, str(tmp_path / "nothing")) and L.is_delta_table(cspark, path)
    assert list(cspark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["partitionColumns"]) == ["event_date"]

    # past Delta's checkpoint interval (10 commits): the txn version now comes from the checkpoint + later commits
    for i in range(12):
        off = 100 + 10 * i
        w = stage(tmp_path / f"c{i}", Win(10 + i, off, off, {"shop.a": [Part(cols, [(I, off, 0, 0, 100 + i)])]}))
        assert L.apply_changelog(cspark, lake, *w) == 1
        expected.append((k(off), 0, I, dt.date(2024, 5, 2)))
    assert (Path(path) / "_delta_log" / "_last_checkpoint").is_file()
    assert L.read_table_version(cspark, path, L.changelog_app_id("d1")) == k(210)
    assert L.apply_changelog(cspark, lake, *w2b) == 0
    assert rows(cspark, path, "pos", "row", "op", "event_date") == expected


def test_delta_skips_a_recorded_txn_version_on_connect(cspark: Any, tmp_path: Path) -> None:
    """Delta's own idempotency through Connect session confs (not the lake package's pre-check): a write whose
    txnVersion is not above the recorded one for its appId commits nothing."""
    path = str(tmp_path / "t")
    cspark.sql(f"CREATE TABLE delta.`{path}` (id INT, v STRING) USING delta")

    def write(app: str, ver: int, kind: str) -> None:
        cspark.conf.set(TXN_APP, app)
        cspark.conf.set(TXN_VERSION, str(ver))
        try:
            df = cspark.createDataFrame([(ver, kind)], "id INT, v STRING")
            if kind == "append":
                df.write.format("delta").mode("append").save(path)
            elif kind == "merge":
                df.createOrReplaceTempView("src")
                cspark.sql(f"MERGE INTO delta.`{path}` t USING src s ON t.id = s.id "
                           "WHEN NOT MATCHED THEN INSERT *").collect()
            else:
                cspark.sql(f"DELETE FROM delta.`{path}` WHERE id = 5").collect()
        finally:
            cspark.conf.unset(TXN_APP)
            cspark.conf.unset(TXN_VERSION)

    write("app", 5, "append")
    v = version(cspark, path)
    assert L.read_table_version(cspark, path, "app") == 5
    write("app", 5, "append")   # same version
    write("app", 4, "merge")    # older
    write("app", 5, "delete")
    assert version(cspark, path) == v
    assert rows(cspark, path, "id", "v") == [(5, "append")]
    write("other", 1, "merge")  # another appId is independent
    write("app", 6, "append")
    assert version(cspark, path) == v + 2
    assert rows(cspark, path, "id", "v") == [(1, "merge"), (5, "append"), (6, "append")]
    assert (L.read_table_version(cspark, path, "app"), L.read_table_version(cspark, path, "other")) == (6, 1)


# ---- mirrors ----------------------------------------------------------------------------------------------------


def test_mirror_merge_with_row_guard(cspark: Any, tmp_path: Path) -> None:
    lake = L.Lake(str(tmp_path / "lake"))
    name, path = "shop.items", lake.mirror_path("shop", "items")
    snap_pos = k(300)   # changes below 300 are in the snapshot
    snap_file = tmp_path / "snapshot.parquet"
    pq.write_table(pa.table({"id": pa.array([1, 2, 6], pa.int32()), "name": ["ann", "bob", "fay"],
                             "price": pa.array([p("1.00"), p("2.00"), p("6.00")], pa.decimal128(10, 2))}), snap_file)
    L.write_snapshot(cspark, lake, "shop", "items", snap_file, snap_pos)
    assert rows(cspark, path, "id", "_canal_pos") == [(1, snap_pos - 1), (2, snap_pos - 1), (6, snap_pos - 1)]
    w = stage(tmp_path / "s", Win(1, 200, 320, {name: [Part(ITEMS, [
        (I, 200, 0, 0, 1, "old", p("0.10")),      # older than the snapshot's row: the guard refuses it
        (I, 210, 0, 0, 3, "cyd", p("3.00")),      # inserted and deleted before the snapshot
        (D, 220, 0, 0, 3, "cyd", p("3.00")),
        (D, 230, 0, 0, 4, "dan", p("4.00")),      # a delete of a row the snapshot does not hold
        (U, 240, 0, 0, 6, "fay", p("6.00")),      # the snapshot holds this state
        (U, 300, 0, 0, 2, "bea", p("2.20")),      # at the snapshot position: after it, wins
        (I, 310, 0, 0, 5, "eve", p("5.00")),
        (D, 320, 0, 0, 6, "fay", p("6.00")),
    ])]}))
    r = L.apply_mirror(cspark, lake, *w, table_of(w[1], name))
    assert (r.inserted, r.updated, r.deleted, r.position) == (1, 1, 1, k(320))
    expected = [(1, "ann", Decimal("1.00"), snap_pos - 1), (2, "bea", Decimal("2.20"), k(300)),
                (5, "eve", Decimal("5.00"), k(310))]
    assert rows(cspark, path, "id", "name", "price", "_canal_pos") == expected
    v = version(cspark, path)
    again = L.apply_mirror(cspark, lake, *w, table_of(w[1], name))            # the same window again
    old = stage(tmp_path / "s2", Win(2, 100, 110, {name: [Part(ITEMS, [(I, 110, 0, 0, 9, "x", p("9.00"))])]}))
    below = L.apply_mirror(cspark, lake, *old, table_of(old[1], name))       # a part below the watermark
    assert (again.skipped_parts, below.skipped_parts, version(cspark, path)) == (1, 1, v)
    # a re-delivery overlapping the watermark (same start, later end): the guard keeps what is applied
    w2 = stage(tmp_path / "s3", Win(3, 300, 330, {name: [Part(ITEMS, [
        (U, 300, 0, 0, 2, "bea", p("2.20")), (I, 310, 0, 0, 5, "eve", p("5.00")), (D, 320, 0, 0, 6, "fay", p("6.00")),
        (U, 330, 0, 0, 1, "an2", p("1.10"))])]}))
    r2 = L.apply_mirror(cspark, lake, *w2, table_of(w2[1], name))
    assert (r2.inserted, r2.deleted, r2.position) == (0, 0, k(330))
    assert rows(cspark, path, "id", "name", "price", "_canal_pos") == [
        (1, "an2", Decimal("1.10"), k(330)), (2, "bea", Decimal("2.20"), k(300)), (5, "eve", Decimal("5.00"), k(310))]
    assert L.mirror_version(cspark, lake, "shop", "items") == k(330)
    assert cspark.conf.get(TXN_APP, None) is None and cspark.conf.get(TXN_VERSION, None) is None
    props = dict(cspark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect())
    assert props["delta.columnMapping.mode"] == "name"


def test_remerge_beside_a_window(cspark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    remerge_beside_a_window(cspark, tmp_path, monkeypatch)   # its stale plan noticed through the Delta history


def test_schema_evolution_add_column(cspark: Any, tmp_path: Path) -> None:
    lake = L.Lake(str(tmp_path / "lake"))
    name, path = "shop.s", lake.mirror_path("shop", "s")
    base = [("id", pa.int32(), True), ("a", pa.int32(), False), ("b", pa.string(), False)]
    added = [("id", pa.int32(), True), ("a", pa.int32(), False), ("c", pa.date32(), False), ("b", pa.string(), False)]
    day = dt.date(2024, 1, 2)
    w = stage(tmp_path / "s", Win(1, 100, 210, {name: [
        Part(base, [(I, 100, 0, 0, 1, 10, "x"), (I, 100, 1, 0, 2, 20, "y")]),
        Part(added, [(U, 200, 0, 0, 2, 21, day, "y"), (I, 210, 0, 0, 3, 30, None, "z")]),
    ]}, ddl=[(150, "shop", "s", "ALTER", "ALTER TABLE s ADD COLUMN c DATE AFTER a")]))
    r = L.apply_mirror(cspark, lake, *w, table_of(w[1], name))
    assert (r.applied_parts, r.position) == (2, k(210))
    described = [(x["col_name"], x["data_type"]) for x in cspark.sql(f"DESCRIBE TABLE delta.`{path}`").collect()]
    assert described[:7] == [("id", "int"), ("a", "int"), ("c", "date"), ("b", "string"), ("_canal_pos", "bigint"),
                             ("_canal_row", "int"), ("_canal_ts", "timestamp")]
    assert rows(cspark, path, "id", "a", "c", "b") == [(1, 10, None, "x"), (2, 21, day, "y"), (3, 30, None, "z")]
    assert L.table_state(cspark, path, L.mirror_app_id("shop", "s")).properties["delta.enableTypeWidening"] == "true"


def test_keyless_mirror_on_connect(cspark: Any, tmp_path: Path) -> None:
    """A table without a primary key (pipelines.engine.keyless): copies numbered, a re-delivery straddling the watermark
    counts only the changes above it, the preview equals what the MERGE writes."""
    lake = L.Lake(str(tmp_path / "lake"))
    name, path = "shop.log", lake.mirror_path("shop", "log")
    log = [("a", pa.int32(), False), ("note", pa.string(), False)]
    first = [(I, 100, 0, 0, 1, "x"), (I, 100, 1, 0, 1, "x"), (I, 100, 2, 0, 2, None)]
    w1 = stage(tmp_path / "s1", Win(1, 100, 100, {name: [Part(log, first)]}))
    L.apply_mirror(cspark, lake, *w1, table_of(w1[1], name))
    assert rows(cspark, path, "a", "_canal_dup") == [(1, 1), (1, 2), (2, 1)]
    w2 = stage(tmp_path / "s2", Win(2, 100, 120, {name: [Part(log, [
        *first,
        (D, 110, 0, 0, 1, "x"), (I, 110, 0, 1, 2, None),     # an UPDATE of one copy of (1,x) into (2,NULL)
        (I, 120, 0, 0, 3, "z"),
    ])]}))
    expected = [(1, "x", 1), (2, None, 1), (2, None, 2), (3, "z", 1)]
    preview = L.preview_mirror(cspark, lake, *w2, table_of(w2[1], name))
    assert sorted(tuple(r) for r in preview.select("a", "note", "_canal_dup").collect()) == expected
    r = L.apply_mirror(cspark, lake, *w2, table_of(w2[1], name))
    assert (r.inserted, r.deleted, r.position) == (2, 1, k(120))
    assert rows(cspark, path, "a", "note", "_canal_dup") == expected


# ---- reconciliation ---------------------------------------------------------------------------------------------


def test_reconcile_fingerprint(cspark: Any, tmp_path: Path) -> None:
    """The Spark-side fingerprint of a mirror, computed by the Connect server, equals the Python-side one of the
    rows written out here; one changed value makes it differ."""
    lake = L.Lake(str(tmp_path / "lake"))
    specs = [ColumnSpec("id", "int", True), ColumnSpec("d", "double", False), ColumnSpec("dec", "decimal(12,2)", False),
             ColumnSpec("day", "date", False), ColumnSpec("dt", "datetime(6)", False),
             ColumnSpec("ts", "timestamp(3)", False), ColumnSpec("bin", "varbinary(20)", False),
             ColumnSpec("txt", "varchar(20)", False)]
    cols = [(c.name, arrow_type(c.mysql_type), c.is_key) for c in specs]
    utc = dt.UTC
    data = [
        (1, -0.0, Decimal("-0.00"), dt.date(1969, 12, 31), dt.datetime(1950, 6, 1, 12, 0, 0, 1),
         dt.datetime(2038, 1, 19, tzinfo=utc), b"", "中文😀"),
        (2, 1.5e300, Decimal("1234567890.12"), dt.date(2024, 2, 29), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
         dt.datetime(1970, 1, 1, 0, 0, 0, 1000, tzinfo=utc), b"\x00\xff", ""),
        (3, None, None, None, None, None, None, None),
    ]
    part = Part(cols, [(I, 100, i, 0, *r) for i, r in enumerate(data)])
    w = stage(tmp_path / "s", Win(1, 100, 100, {"shop.f": [part]}))
    L.apply_mirror(cspark, lake, *w, table_of(w[1], "shop.f"))
    path = lake.mirror_path("shop", "f")
    expected = pa.table({c.name: pa.array([r[i] for r in data], arrow_type(c.mysql_type))
                         for i, c in enumerate(specs)})
    want = arrow_fingerprint(expected, specs, label="expected")
    got = dataframe_fingerprint(cspark.read.format("delta").load(path), specs, label="mirror")
    assert got.count == cspark.sql(f"SELECT count(*) FROM delta.`{path}`").first()[0] == 3
    assert got == want, got.diff(want)
    cspark.sql(f"UPDATE delta.`{path}` SET txt = 'x' WHERE id = 2").collect()
    damaged = dataframe_fingerprint(cspark.read.format("delta").load(path), specs, label="mirror")
    assert damaged.count == 3 and damaged != want and "rows differ" in damaged.diff(want)


def test_table_state_from_the_local_log_equals_the_spark_replay(cspark: Any, tmp_path: Path) -> None:
    """On a Connect server on this machine the table state is read from the log files here (no Spark job): past a
    checkpoint, with several txn appIds and a property change, it equals the replay through Spark and what was
    written; a log it cannot replay exactly is left to Spark."""
    from pipelines.engine.lake import delta_log

    path = str(tmp_path / "t")
    table_with_txns(cspark, path)
    log_dir = delta_log._local_log_dir(cspark, path)
    assert log_dir == f"{path}/_delta_log" and (tmp_path / "t" / "_delta_log" / "_last_checkpoint").exists()
    local = delta_log._read_local_log(log_dir)
    assert local is not None and local == delta_log._log_snapshot(cspark, path)
    assert (local.version, local.txns) == (13, {"odd": 111, "even": 112})
    assert (local.properties["canal.x"], local.properties["canal.y"]) == ("b", "c")
    st = L.table_state(cspark, path, "even")
    assert (st.exists, st.version, st.position) == (True, 13, 112)
    assert delta_log._read_local_log(str(tmp_path / "none" / "_delta_log")) is None
    assert not L.is_delta_table(cspark, str(tmp_path / "none"))
    assert delta_log._local_log_dir(cspark, "s3a://bucket/lake/t") is None
    # the checkpoint's hint gone and the first commit cleaned up: no exact replay here; Spark's is the answer
    (tmp_path / "t" / "_delta_log" / "_last_checkpoint").unlink()
    (tmp_path / "t" / "_delta_log" / f"{0:020d}.json").unlink()
    with pytest.raises(delta_log._Unreadable):
        delta_log._read_local_log(log_dir)


def test_stop(server: tuple[str, dict[str, str]], cspark: Any) -> None:
    url, env = server
    cspark.stop()   # released first: a client whose server is gone retries its release for minutes
    pid = (Path(env["CANAL_SPARK_CONNECT_DIR"]) / "server.pid").read_text().strip()
    r = _script(env, "stop", timeout=120)
    assert r.returncode == 0, r.stderr
    assert not Path(f"/proc/{pid}").exists()
    assert _script(env, "status").returncode == 1
    assert _script(env, "stop").returncode == 0 and "not running" in _script(env, "stop").stderr
    assert url.startswith("sc://127.0.0.1:")
