"""canal_core: a Canal-compatible MySQL/MariaDB binlog CDC engine."""

__version__ = "0.1.0"
