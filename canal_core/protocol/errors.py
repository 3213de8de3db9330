"""The root of canal_core's typed errors.

Every failure the library reports on purpose (a binlog it cannot decode, a connection or position it
cannot use, bad configuration, a refused request) is a ``CanalError``, so a caller can tell them from bugs
with one ``except``. Each subclass keeps the builtin base it had (``ValueError`` for configuration,
``RuntimeError`` for the store) so existing handlers keep working.
"""

from __future__ import annotations


class CanalError(Exception):
    """Base of canal_core's typed errors; the message says where (binlog file:position, schema.table,
    destination, config key) and what to do."""
