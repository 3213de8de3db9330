"""pipelines.engine.defaults: the value existing rows take when a column is added equals what MariaDB gives them."""

from __future__ import annotations

from typing import Any

import pytest

from pipelines.engine.defaults import source_defaults
from pipelines.engine.reconcile import table_columns
from pipelines.engine.types import from_db, select_expr

pytestmark = pytest.mark.integration

# (column DDL added after a row exists); the row's value is then read back by SELECT
ADDED = [
    "c_int INT DEFAULT 7", "c_int_nn INT NOT NULL", "c_null INT", "c_neg DECIMAL(8,3) DEFAULT -1.250",
    "c_ubig BIGINT UNSIGNED NOT NULL DEFAULT 18446744073709551615", "c_dbl DOUBLE DEFAULT 2.5e-3",
    "c_str VARCHAR(20) DEFAULT 'it''s'", "c_str_nn VARCHAR(5) NOT NULL", "c_txt TEXT NOT NULL",
    "c_enum ENUM('a','b','c') DEFAULT 'b'", "c_enum_nn ENUM('x','y') NOT NULL", "c_set SET('p','q','r') DEFAULT 'p,r'",
    "c_bit BIT(5) DEFAULT b'101'", "c_date DATE DEFAULT '2020-02-29'",
    "c_dt DATETIME(3) DEFAULT '2021-01-02 03:04:05.678'",
    "c_year YEAR DEFAULT 1999", "c_bin VARBINARY(4) NOT NULL", "c_dec_nn DECIMAL(5,2) NOT NULL",
]


def test_defaults_match_what_the_server_gives_existing_rows(mariadb_settings: Any, admin_conn: Any) -> None:
    t = "canal_test.defaults_t"
    with admin_conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {t}")
        cur.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY)")
        cur.execute(f"INSERT INTO {t} VALUES (1)")
        for ddl in ADDED:
            cur.execute(f"ALTER TABLE {t} ADD COLUMN {ddl}")
    cols = [c for c in table_columns(mariadb_settings.repl_kwargs(), "canal_test", "defaults_t") if c.name != "id"]
    with admin_conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(select_expr(c.name, c.mysql_type) for c in cols)} FROM {t}")
        row = cur.fetchone()
    provide = source_defaults(mariadb_settings.repl_kwargs())
    want = {c.name: from_db(c.mysql_type, c.name)(v) for c, v in zip(cols, row, strict=True)}
    got = {c.name: provide("canal_test", "defaults_t", c.name, c.mysql_type) for c in cols}
    with admin_conn.cursor() as cur:
        cur.execute(f"DROP TABLE {t}")
    assert got == want
    assert want["c_int"] == 7 and want["c_enum"] == "b" and want["c_null"] is None  # the oracle is not trivial
