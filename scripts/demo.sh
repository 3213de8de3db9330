#!/usr/bin/env bash
# Demo: set everything up, make a few changes on the private MariaDB and print their binlog events.
#
#   scripts/demo.sh
#
# 1. scripts/setup.sh (idempotent: installs what is missing, starts the private MariaDB `primary`)
# 2. (re)creates canal_test.demo_orders and takes the binlog position (SHOW MASTER STATUS)
# 3. a small workload: one DDL, inserts (JSON, DECIMAL, UUID, INET6 values), an update, a delete
# 4. prints those events with `canal-binlog`, read live from the position taken, as a replica
#    (non-blocking: it stops at the current end of the binlog), with --schema-hints so that MariaDB's
#    UUID/INET6 columns print as text, and --brief for readable lines.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

scripts/setup.sh

# Headings on stdout, in order with canal-binlog's lines; bold only on a terminal.
if [[ -t 1 ]]; then B=$'\033[1m'; N=$'\033[0m'; else B=""; N=""; fi
say() { printf '\n%s== %s%s\n' "$B" "$*" "$N"; }
sql() { scripts/mariadb.sh client primary -N -B -e "$1"; }

PORT="$(scripts/mariadb.sh port primary)"
TABLE="canal_test.demo_orders"

say "creating $TABLE"
sql "DROP TABLE IF EXISTS $TABLE;
CREATE TABLE $TABLE (
    id       INT PRIMARY KEY,
    customer VARCHAR(64) NOT NULL,
    amount   DECIMAL(10,2) NOT NULL,
    attrs    JSON,
    ref      UUID,
    client   INET6,
    created  DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) DEFAULT CHARSET=utf8mb4"

read -r FILE POS < <(sql "SHOW MASTER STATUS" | cut -f1,2)
say "binlog position before the workload: $FILE:$POS"

WORKLOAD="ALTER TABLE $TABLE ADD COLUMN status ENUM('new','paid','shipped') NOT NULL DEFAULT 'new' AFTER amount;
INSERT INTO $TABLE (id, customer, amount, attrs, ref, client) VALUES
    (1, 'Zoë',   19.99,  '{\"items\": [\"book\", \"pen\"], \"gift\": true}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2001:db8::1'),
    (2, 'Ahmed', 250.00, '{\"items\": [\"lamp\"]}',                      UUID(),                                 '::ffff:192.0.2.7'),
    (3, 'Chen',  -3.50,  NULL,                                             NULL,                                   NULL);
UPDATE $TABLE SET status = 'paid', amount = amount + 0.01, attrs = JSON_SET(attrs, '$.gift', false) WHERE id = 1;
DELETE FROM $TABLE WHERE id = 3;"
say "workload"
printf '%s\n' "$WORKLOAD"
sql "$WORKLOAD"

# the password from the environment: on the command line (--password, --url) every user could read it in ps
say "CANAL_BINLOG_PASSWORD=*** canal-binlog --url mysql://canal@127.0.0.1:$PORT --start-file $FILE --start-position $POS --schema-hints --brief"
CANAL_BINLOG_PASSWORD=canal .venv/bin/canal-binlog --url "mysql://canal@127.0.0.1:$PORT" --start-file "$FILE" \
    --start-position "$POS" --schema-hints --brief
