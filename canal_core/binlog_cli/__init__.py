"""The ``canal-binlog`` command (``python -m canal_core.binlog_cli``): binlogs, from files or a live server, as
JSON lines. It sits above the decoder (``canal_core.binlog``) and the replica connection (``canal_core.mysql``)."""
