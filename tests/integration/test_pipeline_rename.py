"""RENAME TABLE through the whole pipeline: the canal sensor, its staged windows and the canal_window runs
(tests/integration/pipeline_driver.py) against a real Dagster instance directory, the private MariaDB and
local Spark/Delta.

docs/lake.md ("DDL: TRUNCATE, DROP, RENAME, CREATE"): at the position p of ``RENAME TABLE a TO b`` or ``ALTER
TABLE a RENAME TO b`` the mirror of b becomes a copy of a's rows (txn version p) and a's mirror is emptied and
marked dropped (its rows still readable by time travel). A name the loaded definitions do not know gets no
mirror asset until the code location is reloaded (pipelines/defs/assets/tables.py); its changes reach the
changelog meanwhile, and after the reload the sensor snapshots it.

1. One window with changes of two tables, ``RENAME TABLE orders TO orders_v2``, ``ALTER TABLE customers RENAME
   TO clients`` and changes under the new names: the new mirrors are copies of the old tables' rows at the
   rename (SELECTs just before it) at a txn version between the binlog positions around the statement, the old
   mirrors are empty, marked dropped and hold the old rows one version back; after a reload and more writes the
   new mirrors equal ``SELECT * FROM`` the new names, and the changelog holds every row change once, in order,
   under the table name of its time.
2. A RENAME alone in a window (no row change of the renamed table): the run still takes the renamed table's
   mirror (a RENAME entry names the new table only, as Canal's header does).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipelines.engine.lake import Lake
from pipelines.engine.reconcile import table_columns
from pipelines.engine.window import order_key
from tests.integration.binlog_end import binlog_end
from tests.integration.pipeline_driver import (
    Driver,
    RecordedChanges,
    changelog_changes,
    drive_until_idle,
    make_config,
    mirror_rows,
    source_rows,
)

pytestmark = pytest.mark.integration

SCHEMA = "canal_rename_it"


@pytest.fixture
def db(mariadb_settings: Any) -> Iterator[RecordedChanges]:
    w = RecordedChanges(mariadb_settings, SCHEMA)
    w.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
    w.execute(f"CREATE DATABASE {SCHEMA}")
    w.execute(f"CREATE TABLE {SCHEMA}.orders (id INT PRIMARY KEY, customer VARCHAR(32) NOT NULL, "
              "amount DECIMAL(10,2) NOT NULL, note VARCHAR(64) NULL)")
    w.execute(f"CREATE TABLE {SCHEMA}.customers (id INT PRIMARY KEY, name VARCHAR(32) NOT NULL, city VARCHAR(32))")
    yield w
    w.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
    w.close()


def _master_key(settings: Any) -> int:
    return order_key(*binlog_end(settings.repl_kwargs()))


def _select(settings: Any, table: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    return source_rows(settings, SCHEMA, table, table_columns(settings.repl_kwargs(), SCHEMA, table))


def _mirror(spark: Any, lake: Lake, settings: Any, table: str, columns_of: str | None = None) -> dict[Any, Any]:
    cols = table_columns(settings.repl_kwargs(), SCHEMA, columns_of or table)
    return mirror_rows(spark, lake.mirror_path(SCHEMA, table), cols)


def _props(spark: Any, path: str) -> dict[str, str]:
    return {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}


def _watermark(spark: Any, path: str, schema: str, table: str) -> int | None:
    """The mirror's txn version, read from the Delta log's SetTransaction actions by Spark."""
    from pyspark.sql import functions as F

    log = spark.read.json([str(f) for f in sorted(Path(path, "_delta_log").glob("*.json"))])
    if "txn" not in log.columns:
        return None
    row = (log.where(F.col("txn.appId") == f"canal:mirror:{schema}.{table}")
           .agg(F.max("txn.version").alias("v")).first())
    return None if row is None or row["v"] is None else int(row["v"])


def _converge(driver: Driver, spark: Any, lake: Lake, settings: Any, tables: list[str],
              timeout: float = 150) -> None:
    deadline = time.monotonic() + timeout
    why = ""
    while time.monotonic() < deadline:
        drive_until_idle(driver, timeout=max(1.0, deadline - time.monotonic()))
        why = ""
        for t in tables:
            try:
                got = _mirror(spark, lake, settings, t)
            except Exception as e:  # no mirror yet
                why = f"{t}: {type(e).__name__}"
                break
            if got != _select(settings, t):
                why = f"{t}: mirror differs from SELECT"
                break
        if not why:
            return
    pytest.fail(f"mirrors did not converge in {timeout:.0f} s: {why}; cursor {driver.cursor}")


def _start(settings: Any, w: RecordedChanges, tmp_path: Path, destination: str) -> tuple[Driver, Lake]:
    for i in range(1, 6):  # rows before the pipeline: the initial snapshot loads them
        w.execute(f"INSERT INTO {SCHEMA}.orders VALUES (%s, %s, %s, NULL)", (i, f"c{i}", f"{i}.25"))
        w.execute(f"INSERT INTO {SCHEMA}.customers VALUES (%s, %s, 'Oslo')", (i, f"name{i}"))
    cfg = make_config(tmp_path, settings, destination, f"{SCHEMA}\\\\..*")
    driver = Driver(cfg, tmp_path / "home")
    driver.tick()  # starts the Canal instance at the binlog end and snapshots both tables
    return driver, Lake(cfg.lake_root)


def _check_renamed(spark: Any, lake: Lake, settings: Any, old: str, new: str, rows_at_rename: dict[Any, Any],
                   lo: int, hi: int) -> int:
    """docs/lake.md on a rename at p (lo <= p < hi, the binlog before and after the statement): mirror ``new`` is a
    copy of the rows ``old`` had (txn version p), mirror ``old`` is emptied and marked dropped at p, its rows still
    readable by time travel. Returns p."""
    old_path, new_path = lake.mirror_path(SCHEMA, old), lake.mirror_path(SCHEMA, new)
    assert (Path(new_path) / "_delta_log").is_dir(), f"the rename {old} -> {new} made no mirror {new}"
    assert _mirror(spark, lake, settings, new) == rows_at_rename
    assert spark.read.format("delta").load(old_path).count() == 0, f"mirror {old} still has rows"
    props = _props(spark, old_path)
    assert "canal.dropped" in props, f"mirror {old} is not marked dropped: {props}"
    p = int(props["canal.dropped"])
    assert lo <= p < hi, (lo, p, hi)
    assert props["canal.emptied"] == str(p) and _watermark(spark, old_path, SCHEMA, old) == p
    assert _watermark(spark, new_path, SCHEMA, new) == p and "canal.dropped" not in _props(spark, new_path)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{old_path}`").where(f"userMetadata = 'canal:rename@{p}'")
    before_rename = min(r["version"] for r in history.collect()) - 1
    cols = table_columns(settings.repl_kwargs(), SCHEMA, new)
    old_rows = spark.read.format("delta").option("versionAsOf", before_rename).load(old_path)
    assert {tuple(r[c.name] for c in cols if c.is_key): r
            for r in old_rows.select(*[c.name for c in cols]).toArrow().to_pylist()} == rows_at_rename
    return p


def test_rename_table_through_the_pipeline(mariadb_settings: Any, db: RecordedChanges, tmp_path: Path,
                                           spark: Any) -> None:
    w = db
    driver, lake = _start(mariadb_settings, w, tmp_path, "renameit")
    # changes of both tables through the stream
    for i in range(6, 11):
        w.insert("orders", id=i, customer=f"c{i}", amount=f"{i}.50", note="new")
    w.update("orders", 2, amount="200.0", note="raised")  # Canal's text of DECIMAL(12,2) 200.00
    w.delete("orders", 3)
    w.insert("customers", id=6, name="name6", city="Bergen")
    w.update("customers", 1, city="Tromsø")
    _converge(driver, spark, lake, mariadb_settings, ["orders", "customers"])

    # one window: changes of both tables, both kinds of rename, changes under the new names
    w.update("orders", 4, note="before the rename")
    w.insert("orders", id=11, customer="c11", amount="11.0", note=None)
    orders_at_rename = _select(mariadb_settings, "orders")
    k0 = _master_key(mariadb_settings)
    w.execute(f"RENAME TABLE {SCHEMA}.orders TO {SCHEMA}.orders_v2")
    k1 = _master_key(mariadb_settings)
    w.update("customers", 4, name="before the rename")
    customers_at_rename = _select(mariadb_settings, "customers")
    k2 = _master_key(mariadb_settings)
    w.execute(f"ALTER TABLE {SCHEMA}.customers RENAME TO {SCHEMA}.clients")
    k3 = _master_key(mariadb_settings)
    w.insert("orders_v2", id=12, customer="c12", amount="12.0", note="after")
    w.update("orders_v2", 1, amount="1.0", note="after the rename")
    w.delete("orders_v2", 5)
    w.insert("clients", id=7, name="name7", city="Bodø")
    runs = len(driver.runs)
    time.sleep(1)  # the live parser has all of it before the sensor takes a window
    drive_until_idle(driver)
    assert len(driver.runs) == runs + 1, "the statements above were not taken as one window"

    _check_renamed(spark, lake, mariadb_settings, "orders", "orders_v2", orders_at_rename, k0, k1)
    _check_renamed(spark, lake, mariadb_settings, "customers", "clients", customers_at_rename, k2, k3)

    # a code-location reload: the new names are mirrored (snapshot + catch-up), the writes go on
    driver.reload()
    w.update("orders_v2", 2, note="after the reload")
    w.insert("orders_v2", id=13, customer="c13", amount="13.13", note=None)
    w.update("clients", 7, city="Alta")
    w.delete("clients", 2)
    _converge(driver, spark, lake, mariadb_settings, ["orders_v2", "clients"])
    for i in range(100, 103):
        w.insert("orders_v2", id=i, customer="late", amount="0.01", note=None)
    w.update("clients", 3, name="renamed")
    _converge(driver, spark, lake, mariadb_settings, ["orders_v2", "clients"])
    for old in ("orders", "customers"):  # the old names' mirrors stay empty
        assert spark.read.format("delta").load(lake.mirror_path(SCHEMA, old)).count() == 0

    # the changelog: every row change once, in binlog order, under the name the table had at the time
    assert changelog_changes(spark, lake.changelog_path(), SCHEMA) == w.log


def test_rename_alone_in_a_window(mariadb_settings: Any, db: RecordedChanges, tmp_path: Path, spark: Any) -> None:
    w = db
    driver, lake = _start(mariadb_settings, w, tmp_path, "renamealone")
    w.update("orders", 1, note="streamed")
    _converge(driver, spark, lake, mariadb_settings, ["orders", "customers"])

    # the usual case: the rename on its own (this window holds a change of another table only)
    orders_at_rename = _select(mariadb_settings, "orders")
    k0 = _master_key(mariadb_settings)
    w.execute(f"RENAME TABLE {SCHEMA}.orders TO {SCHEMA}.orders_v2")
    k1 = _master_key(mariadb_settings)
    w.update("customers", 2, city="Narvik")
    drive_until_idle(driver)
    _check_renamed(spark, lake, mariadb_settings, "orders", "orders_v2", orders_at_rename, k0, k1)
